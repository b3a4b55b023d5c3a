"""TextArena single-player games as verl rows (`agentrl env prepare textarena:ENV_ID`).

Each row is one episode: the game reset for one player with its own seed, its first
observation as the prompt (under a system prompt that asks for the move inside
`<answer></answer>`), `interaction_kwargs = {"name": "textarena", "env_id", "seed"}` so the
TextArena interaction (`agentrl.interactions.textarena`) replays the same game, and
`data_source = textarena/ENV_ID` (scored by the game's own reward). Train and test episodes
use disjoint seed ranges.
"""

from __future__ import annotations

from typing import Any

from agentrl.utils.answer_tags import ANSWER_TAG

SYSTEM_PROMPT = (
    "You are playing a text game. Each turn, reply with your move inside "
    "<answer></answer>, written exactly as the game asks (for example <answer>[5]</answer>)."
)
INTERACTION_NAME = "textarena"
TEST_SEED_OFFSET = 1_000_000  # test episodes' seeds start here (train's from the seed)


def make_rows(env_id: str, seeds: list[int], split: str,
              answer_tag: str = ANSWER_TAG) -> list[dict[str, Any]]:
    """One row per episode seed (the game is reset to read its first observation)."""
    from agentrl.interactions.textarena import make_game

    system = SYSTEM_PROMPT.replace("<answer></answer>", f"<{answer_tag}></{answer_tag}>")
    rows = []
    for index, seed in enumerate(seeds):
        game, first = make_game(env_id, seed)
        game.close()
        rows.append({
            "data_source": f"textarena/{env_id}",
            "prompt": [{"role": "system", "content": system},
                       {"role": "user", "content": first}],
            "ability": "game",
            "reward_model": {"style": "interaction", "ground_truth": ""},
            "extra_info": {
                "index": index, "split": split, "seed": seed,
                "interaction_kwargs": {"name": INTERACTION_NAME, "env_id": env_id,
                                       "seed": seed},
            },
        })  # fmt: skip
    return rows


def interaction_config(answer_tag: str = ANSWER_TAG) -> dict[str, Any]:
    """The interaction YAML's content for these rows."""
    return {"interaction": [{
        "name": INTERACTION_NAME,
        "class_name": "agentrl.interactions.textarena.TextArenaInteraction",
        "config": {"answer_tag": answer_tag},
    }]}  # fmt: skip


def prepare(env_id: str, size: int, test_size: int, seed: int,
            answer_tag: str = ANSWER_TAG) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """(train rows, test rows, {"interaction": config}): seeds disjoint by range."""
    if seed + size > TEST_SEED_OFFSET:
        raise ValueError(f"--seed + --size must stay below {TEST_SEED_OFFSET} (the test "
                         "episodes' seeds)")
    train = make_rows(env_id, list(range(seed, seed + size)), "train", answer_tag)
    test_seeds = list(range(TEST_SEED_OFFSET + seed, TEST_SEED_OFFSET + seed + test_size))
    test = make_rows(env_id, test_seeds, "test", answer_tag)
    return train, test, {"interaction": interaction_config(answer_tag)}


__all__ = ["interaction_config", "make_rows", "prepare"]
