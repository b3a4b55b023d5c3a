"""TextArena single-player games as verl rows (`agentrl env prepare textarena:ENV_ID`).

Each row is one episode: the game reset for one player with its own seed, its first
observation as the prompt (under a system prompt that asks for the move inside
`<answer></answer>`), `interaction_kwargs = {"name": "textarena", "env_id", "seed"}` so the
TextArena interaction (`agentrl.interactions.textarena`) replays the same game, and
`data_source = textarena/ENV_ID` (scored by the game's own reward).

Train and test share no prompt (`agentrl.environments.split`): train seeds from the seed,
test seeds from TEST_SEED_OFFSET on, and a seed whose first observation an earlier row
already has is skipped. A game whose first observation is the same for every seed
(Bandit, GuessTheNumber, Mastermind, Minesweeper and their variants: the odds, the number,
the code, the mines are hidden) is therefore refused, naming `allow_shared_prompts`
(`--allow-shared-prompts`); with it a game is its first observation and its setup at reset
(the state's `game_state`: GuessTheNumber's number, Mastermind's code), plus the seed for a
game that lays its setup at the first move from its seeded stream (Minesweeper's mines),
and train and test share no game but share their prompt. A game that ignores its seed
(Countdown-v0, Cryptarithm-v0, PegJump-v0, TowerOfHanoi-v0 and their variants: one puzzle
each) is refused either way, and one with fewer games than asked for (GuessTheNumber-v0 has
20) says how many it has.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentrl.environments.split import TEST_SEED_OFFSET, draw_disjoint
from agentrl.utils.answer_tags import ANSWER_TAG

SYSTEM_PROMPT = (
    "You are playing a text game. Each turn, reply with your move inside "
    "<answer></answer>, written exactly as the game asks (for example <answer>[5]</answer>)."
)
INTERACTION_NAME = "textarena"
# games whose setup is drawn at the first move, not at reset (Minesweeper lays its mines
# then, away from the first cell): their state at reset is the same for every seed, and
# the seed's stream is what makes the game
SETUP_AT_FIRST_MOVE = ("MinesweeperEnv",)


def system_prompt(answer_tag: str = ANSWER_TAG) -> str:
    return SYSTEM_PROMPT.replace("<answer></answer>", f"<{answer_tag}></{answer_tag}>")


def row(env_id: str, seed: int, first: str, split: str, index: int,
        answer_tag: str = ANSWER_TAG) -> dict[str, Any]:
    """The row of the game `seed`, whose first observation is `first`."""
    return {
        "data_source": f"textarena/{env_id}",
        "prompt": [{"role": "system", "content": system_prompt(answer_tag)},
                   {"role": "user", "content": first}],
        "ability": "game",
        "reward_model": {"style": "interaction", "ground_truth": ""},
        "extra_info": {
            "index": index, "split": split, "seed": seed,
            "interaction_kwargs": {"name": INTERACTION_NAME, "env_id": env_id, "seed": seed},
        },
    }  # fmt: skip


def make_rows(env_id: str, seeds: list[int], split: str,
              answer_tag: str = ANSWER_TAG) -> list[dict[str, Any]]:
    """One row per episode seed (the game is reset to read its first observation)."""
    from agentrl.interactions.textarena import make_game

    rows = []
    for index, seed in enumerate(seeds):
        game, first = make_game(env_id, seed)
        game.close()
        rows.append(row(env_id, seed, first, split, index, answer_tag))
    return rows


def game_key(game: Any, first: str, seed: int) -> str:
    """What makes a game this one: its first observation and its setup at reset (see the
    module docstring). Object addresses in the state's text are dropped (RushHour keeps
    objects there), so two equal setups give equal keys."""
    env = game.env
    while hasattr(env, "env"):  # TextArena's wrappers hold the game as .env
        env = env.env
    state = getattr(getattr(env, "state", None), "game_state", None)
    setup = re.sub(r" at 0x[0-9a-fA-F]+", "", json.dumps(state, sort_keys=True, default=repr))
    later = f"\nseed {seed}" if type(env).__name__ in SETUP_AT_FIRST_MOVE else ""
    return f"{first}\n{setup}{later}"


def _game(env_id: str, seed: int) -> tuple[tuple[int, str], str, str]:
    """((seed, first observation), its prompt, its game) of the game `seed`."""
    from agentrl.interactions.textarena import make_game

    game, first = make_game(env_id, seed)
    key = game_key(game, first, seed)
    game.close()
    return (seed, first), first, key


def interaction_config(answer_tag: str = ANSWER_TAG) -> dict[str, Any]:
    """The interaction YAML's content for these rows."""
    return {"interaction": [{
        "name": INTERACTION_NAME,
        "class_name": "agentrl.interactions.textarena.TextArenaInteraction",
        "config": {"answer_tag": answer_tag},
    }]}  # fmt: skip


def prepare(env_id: str, size: int, test_size: int, seed: int, answer_tag: str = ANSWER_TAG, *,
            allow_shared_prompts: bool = False
            ) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """(train rows, test rows, {"interaction": config}): no prompt in both, none twice (with
    `allow_shared_prompts`: no game in both, none twice)."""
    if env_id.endswith("-raw"):  # refused before a game is made: some take seconds to make
        raise ValueError(f"textarena:{env_id}: a -raw id gives the game's messages unrendered "
                         "(a list, not text): use the id without -raw")
    train, test = draw_disjoint(f"textarena:{env_id}", lambda s: _game(env_id, s), size,
                                test_size, seed, allow_shared_prompts=allow_shared_prompts)
    rows = {split: [row(env_id, s, first, split, index, answer_tag)
                    for index, (s, first) in enumerate(games)]
            for split, games in (("train", train), ("test", test))}  # fmt: skip
    return rows["train"], rows["test"], {"interaction": interaction_config(answer_tag)}


__all__ = ["SETUP_AT_FIRST_MOVE", "TEST_SEED_OFFSET", "game_key", "interaction_config",
           "make_rows", "prepare", "row", "system_prompt"]
