"""The ``blackjack`` task of `agentrl quickstart` (the multi-turn half of recipes/envs/):
TextArena's ``Blackjack-v0`` played through the TextArena interaction, each model turn a move
and each user turn the game's answer, rewarded by the game itself.

    data = write_blackjack_data(out_dir, settings, direct_phrasings)

A game is 5 hands against a dealer who draws to 17, from an infinite deck; each turn the
game shows the player's hand with its score and the dealer's up card, the model answers
``<answer>[Hit]</answer>`` or ``<answer>[Stand]</answer>``, and the game's reward is the
share of hands won (a draw counts as no win). The rows are
`agentrl.environments.textarena.make_rows`' (what `agentrl env prepare
textarena:Blackjack-v0` writes: ``data_source: textarena/Blackjack-v0``, the game's seed in
``interaction_kwargs``), and the interaction config is its ``interaction_config``; the
pools are games of disjoint seeds (a seed and the moves played fix a game:
`agentrl.interactions.textarena.Game`).

The imperfect teacher hits on 16 or less, and on the hands of 17 to 21 a share
``direct_rate`` of its moves (0.9 in the quickstart) hit too: a hit there almost always
busts. Its conversations are whole games it played in the real game. After SFT the model's
greedy move is to hit on every hand, which busts every hand (it wins none), and RL has to
learn to stand from the games' rewards, exploring with the teacher's rare stands. Measured
with the game over 2,000 games (bench/blackjack_policies.py): always standing wins 0.37 of
the hands, hitting up to 16 wins 0.41, the basic strategy 0.42.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from agentrl.tasks.quickstart import TaskData

ENV_ID = "Blackjack-v0"
HIGH = range(17, 21)  # the high hands of the decision metrics: 17 to 20
OVER_HIT = range(17, 22)  # the hands on which the teacher mostly hits: 17 to 21
_SCORE = re.compile(r"\(Score: (\d+)\)")
_MOVE = re.compile(r"\[(hit|stand)\]", re.IGNORECASE)


def hand_band(score: int) -> str:
    """``low`` (11 or less: a hit cannot bust), ``mid`` (12-16), ``high`` (17-20) or
    ``21``."""
    if score <= 11:
        return "low"
    if score <= 16:
        return "mid"
    return "high" if score in HIGH else "21"


def last_score(text: str) -> int | None:
    """The player's score in the last hand the game shows in `text` (None if none)."""
    scores = _SCORE.findall(text)
    return int(scores[-1]) if scores else None


def teacher_move(score: int, rng: random.Random, direct_rate: float) -> str:
    """The imperfect teacher's move (see the module docstring)."""
    hit = score <= 16 or (score in OVER_HIT and rng.random() < direct_rate)
    return "[Hit]" if hit else "[Stand]"


def teacher_game(seed: int, prompt: list[dict], rng: random.Random,
                 direct_rate: float) -> tuple[list[dict], float]:
    """The teacher's conversation in game `seed` (whose first observation ends `prompt`) and
    the game's reward."""
    from agentrl.interactions.textarena import make_game

    game, first = make_game(ENV_ID, seed)
    if prompt[-1]["content"] != first:
        raise ValueError(f"{ENV_ID} seed {seed}: the row's prompt is not the game's start")
    messages, text = [dict(m) for m in prompt], first
    while True:
        score = last_score(text)
        if score is None:
            raise ValueError(f"{ENV_ID} seed {seed}: no score in the game's text {text!r}")
        move = teacher_move(score, rng, direct_rate)
        messages.append({"role": "assistant", "content": f"<answer>{move}</answer>"})
        done, text, reward = game.play(move)
        if done:
            return messages, reward
        messages.append({"role": "user", "content": text})


def decision_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """What the model did at each hand score, from `agentrl generate` rows: ``hit_rate_low``,
    ``hit_rate_mid``, ``hit_rate_high``, ``hit_rate_21`` (share of moves that hit with 11 or
    less, 12-16, 17-20, 21; NaN where no such move), ``invalid_move_rate`` (neither move) and
    ``moves_per_game``."""
    hits: dict[str, list[bool]] = {"low": [], "mid": [], "high": [], "21": []}
    invalid = moves = 0
    for row in rows:
        shown = ""
        for message in row["messages"]:
            if message.get("role") == "user":
                shown = str(message.get("content") or "")
                continue
            if message.get("role") != "assistant":
                continue
            moves += 1
            found = _MOVE.findall(str(message.get("content") or ""))
            score = last_score(shown)
            if not found:
                invalid += 1
            elif score is not None and hand_band(score) in hits:
                hits[hand_band(score)].append(found[-1].lower() == "hit")
    rate = {band: sum(v) / len(v) if v else float("nan") for band, v in hits.items()}
    return {
        **{f"hit_rate_{band}": value for band, value in rate.items()},
        "invalid_move_rate": invalid / moves if moves else float("nan"),
        "moves_per_game": moves / len(rows) if rows else float("nan"),
    }


def _seeds(s: Any) -> tuple[list[int], list[int], list[int]]:
    """Test, train and SFT game seeds: disjoint ranges of the run's own block."""
    base = s.seed * 1_000_000
    n_test, n_train = s.n_test, s.n_train
    test = list(range(base, base + n_test))
    train = list(range(base + n_test, base + n_test + n_train))
    sft = list(range(base + n_test + n_train, base + n_test + n_train + s.sft_examples))
    return test, train, sft


def write_blackjack_data(out_dir: Path, s: Any, direct_phrasings: Collection[str]) -> TaskData:
    """SFT conversations, train and test parquet (games of disjoint seeds) and the
    interaction config (`out_dir/interaction.yaml`); the test games are grouped by the band
    of their first hand."""
    import yaml

    from agentrl.environments.textarena import interaction_config, make_rows
    from agentrl.tasks.quickstart import BLACKJACK, check_disjoint
    from agentrl.utils.jsonl import write_jsonl, write_parquet

    test_seeds, train_seeds, sft_seeds = _seeds(s)
    check_disjoint({"sft": set(map(str, sft_seeds)), "train": set(map(str, train_seeds)),
                    "test": set(map(str, test_seeds))})  # fmt: skip
    test, train = make_rows(ENV_ID, test_seeds, "test"), make_rows(ENV_ID, train_seeds, "train")
    rng = random.Random(f"agentrl/blackjack_sft:{s.seed}")
    sft = []
    for seed, row in zip(sft_seeds, make_rows(ENV_ID, sft_seeds, "sft"), strict=True):
        messages, reward = teacher_game(seed, row["prompt"], rng, s.direct_rate)
        sft.append({"messages": messages, "tools": [], "seed": seed, "reward": reward,
                    "uses_tool": True})  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    # where the pipeline reads it: the data dir's file the task names
    (out_dir / str(BLACKJACK.interaction)).write_text(yaml.safe_dump(interaction_config()))
    first_hand = [
        f"first_hand_{hand_band(last_score(r['prompt'][-1]['content']) or 0)}" for r in test
    ]
    return TaskData(
        write_jsonl(sft, out_dir / "sft.jsonl"),
        write_parquet(train, out_dir / "train.parquet"),
        write_parquet(test, out_dir / "test.parquet"),
        {"first_hand": first_hand},
    )


__all__ = ["ENV_ID", "decision_metrics", "hand_band", "last_score", "teacher_game",
           "teacher_move", "write_blackjack_data"]
