"""The blackjack quickstart task: TextArena's Blackjack-v0 rows and interaction, the
over-hitting teacher playing the real game, disjoint pools, the per-score decision metrics."""

from __future__ import annotations

import asyncio
import json
import random
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

pytest.importorskip("textarena")

from agentrl.environments.quickstart_game import (  # noqa: E402
    ENV_ID,
    decision_metrics,
    hand_band,
    last_score,
    teacher_move,
    write_blackjack_data,
)
from agentrl.interactions.textarena import TextArenaInteraction  # noqa: E402
from agentrl.tasks.quickstart import TASKS  # noqa: E402
from agentrl.utils.jsonl import read_jsonl  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    settings = SimpleNamespace(n_test=30, n_train=20, sft_examples=200, seed=2, direct_rate=0.8)
    return write_blackjack_data(tmp_path_factory.mktemp("bj"), settings, ())


def test_the_pools_are_games_of_disjoint_seeds_with_the_interaction_config(data):
    test, train = pd.read_parquet(data.test), pd.read_parquet(data.train)
    sft = [record for _, record in read_jsonl(data.sft)]
    assert (len(test), len(train), len(sft)) == (30, 20, 200)
    seeds = [set(test.extra_info.map(lambda e: e["seed"])),
             set(train.extra_info.map(lambda e: e["seed"])), {r["seed"] for r in sft}]
    assert all(not (a & b) for i, a in enumerate(seeds) for b in seeds[i + 1 :])
    assert set(test.data_source) == {f"textarena/{ENV_ID}"}
    config = yaml.safe_load((data.train.parent / "interaction.yaml").read_text())
    assert config["interaction"][0]["name"] == "textarena"
    assert len(data.groups["first_hand"]) == 30
    assert set(data.groups["first_hand"]) <= {f"first_hand_{b}"
                                              for b in ("low", "mid", "high", "21")}


def test_the_teacher_over_hits_only_on_hands_of_17_to_21():
    rng = random.Random(0)
    assert all(teacher_move(s, rng, 0.0) == "[Hit]" for s in range(4, 17))
    for score in (17, 18, 21):
        moves = [teacher_move(score, rng, 0.9) for _ in range(2000)]
        assert 0.87 < moves.count("[Hit]") / 2000 < 0.93, score
    assert all(teacher_move(s, rng, 0.0) == "[Stand]" for s in range(17, 22))
    assert all(teacher_move(s, rng, 1.0) == "[Hit]" for s in range(4, 22))


def test_each_sft_game_replays_move_for_move_in_the_interaction(data):
    """The teacher's conversations are what the interaction answers to the same moves, and
    end with the game's own reward."""
    interaction = TextArenaInteraction({})
    sft = [record for _, record in read_jsonl(data.sft)][:12]

    async def replay(row):
        instance = await interaction.start_interaction(None, env_id=ENV_ID, seed=row["seed"])
        messages = row["messages"]
        for i, message in enumerate(messages[2:], start=2):
            if message["role"] != "assistant":
                continue
            done, text, reward, _ = await interaction.generate_response(instance, messages[: i + 1])
            if done:
                assert i == len(messages) - 1 and reward == row["reward"]
                return
            assert messages[i + 1] == {"role": "user", "content": text}
        raise AssertionError("the game did not end")

    async def all_at_once():  # games played together are still their seeds' games
        await asyncio.gather(*(replay(row) for row in sft))

    asyncio.run(all_at_once())
    moves = [m["content"] for _, r in read_jsonl(data.sft) for m in r["messages"]
             if m["role"] == "assistant"]  # fmt: skip
    assert set(moves) == {"<answer>[Hit]</answer>", "<answer>[Stand]</answer>"}


def test_decision_metrics_read_each_move_against_the_score_shown():
    shown = "Your hand: 9♠, 9♣ (Score: {})\nDealer shows: 5♣"
    rows = [{"messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": shown.format(18)},
        {"role": "assistant", "content": "<answer>[Hit]</answer>"},
        {"role": "user", "content": "Hand 1: you bust.\n" + shown.format(8)},
        {"role": "assistant", "content": "<answer>[Stand]</answer>"},
        {"role": "user", "content": shown.format(19)},
        {"role": "assistant", "content": "[stand]"},
        {"role": "user", "content": shown.format(14)},
        {"role": "assistant", "content": "no idea"},
        {"role": "user", "content": shown.format(21)},
        {"role": "assistant", "content": "<answer>[Hit]</answer>"},
    ]}]  # fmt: skip
    m = decision_metrics(rows)
    assert m["hit_rate_high"] == 0.5 and m["hit_rate_low"] == 0.0 and m["hit_rate_21"] == 1.0
    assert m["invalid_move_rate"] == 0.2 and m["moves_per_game"] == 5.0
    assert m["hit_rate_mid"] != m["hit_rate_mid"]  # no valid move on 12-16: NaN
    assert [hand_band(s) for s in (4, 11, 12, 16, 17, 20, 21)] == [
        "low", "low", "mid", "mid", "high", "high", "21"]
    assert last_score("(Score: 7) ... (Score: 15)") == 15 and last_score("none") is None


def test_the_task_is_listed_with_its_recipe_and_interaction():
    task = TASKS["blackjack"]
    assert task.recipe_config.is_file() and task.interaction == "interaction.yaml"
    with task.tools(None) as config:
        assert config is None


@pytest.mark.slow
def test_a_short_run_plays_the_game_through_the_interaction(tmp_path):
    """SFT, two GRPO steps and the evaluations through the quickstart's stages: every
    rollout is a game of Blackjack-v0 played turn by turn, rewarded by the game."""
    from agentrl.quickstart import run_quickstart, settings_for

    out = tmp_path / "bj"
    # SFT only has to teach the move format (the games below must get past their first
    # hand): 40 steps of 4 games at 2x the task's lr played valid moves on seeds 0-3
    # (invalid-move rate <= 0.02 after SFT); 30 steps did not on seed 1 (0.56)
    settings = settings_for("blackjack", sft_steps=40, sft_batch_size=4, sft_lr=6e-3,
                            sft_examples=160, steps=2, n_train=8, n_test=4, control=False,
                            overrides=("data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
                                       "actor_rollout_ref.actor.ppo_mini_batch_size=2"))
    # the recipe's batch is 8 x 8; 2 x 2 runs the same stages (plumbing, not learning)
    report = run_quickstart(out, settings)
    written = json.loads((out / "report.json").read_text())
    # compared as JSON text: a decision band no move fell in is NaN, and NaN != NaN
    assert json.dumps(report, sort_keys=True) == json.dumps(written, sort_keys=True)
    for key in ("eval_sft", "eval_rl"):
        m = report[key]
        assert m["trajectories"] == 4 and 0.0 <= m["accuracy"] <= 1.0
        assert {"hit_rate_high", "moves_per_game", "invalid_move_rate"} <= set(m)
        assert set(m["by_first_hand"]) <= {f"first_hand_{b}" for b in ("low", "mid", "high", "21")}
    rows = [json.loads(line) for path in sorted((out / "rl" / "rollouts").glob("*.jsonl"))
            for line in path.read_text().splitlines()]  # fmt: skip
    assert len(rows) == 2 * 2 * 2
    games = [r for r in rows if any("Hand 2/5" in (m["content"] or "") for m in r["messages"]
                                    if m["role"] == "user")]  # fmt: skip
    assert games, "no rollout got past its first hand: the game did not answer"
    assert all(0.0 <= r["score"] <= 1.0 for r in rows)
    # the game's reward: wins of 5 hands (an invalid move ends the game with wins + draws / 2)
    assert all(abs(r["score"] * 10 - round(r["score"] * 10)) < 1e-5 for r in rows)  # float32
