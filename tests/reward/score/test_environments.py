"""The environments' own scoring, reached through default_compute_score by data_source."""

from __future__ import annotations

import json

import pytest

from agentrl.reward.score import default_compute_score, has_scorer, scorer_for
from agentrl.utils.registry import UnknownNameError

rg = pytest.importorskip("reasoning_gym")


def _row_info(task: str, index: int = 0, seed: int = 3) -> tuple[dict, dict]:
    item = rg.create_dataset(task, size=index + 1, seed=seed)[index]
    return item, {"reasoning_gym_entry": json.dumps(item, default=list), "answer_tag": "answer"}


@pytest.mark.parametrize("task", ["basic_arithmetic", "letter_counting", "chain_sum"])
def test_reasoning_gym_scores_the_last_answer_with_the_tasks_own_function(task):
    item, info = _row_info(task)
    source = f"reasoning_gym/{task}"
    right = f"<answer>wrong</answer> on second thought <answer>{item['answer']}</answer>"
    assert default_compute_score(source, right, item["answer"], info) == 1.0
    assert default_compute_score(source, "<answer>-99999</answer>", item["answer"], info) == 0.0
    assert default_compute_score(source, f"{item['answer']} (no tag)", item["answer"], info) == 0.0


def test_a_reasoning_gym_row_without_its_item_is_named():
    with pytest.raises(ValueError, match="extra_info.reasoning_gym_entry"):
        default_compute_score("reasoning_gym/basic_arithmetic", "<answer>1</answer>", "1", {})


def test_textarena_scores_the_games_reward_at_its_end():
    reported = {"rollout_reward_scores": {"user_turn_rewards": [0.0, 0.0, 1.0]}}
    assert default_compute_score("textarena/GuessTheNumber-v0", "", "", reported) == 1.0
    unfinished = {"rollout_reward_scores": {}}
    assert default_compute_score("textarena/GuessTheNumber-v0", "", "", unfinished) == 0.0


def test_openenv_scores_the_episodes_return():
    import numpy as np

    reported = {"rollout_reward_scores": {"user_turn_rewards": np.array([-0.1, -0.1, 1.0])}}
    assert default_compute_score("openenv/GuessEnvironment", "", "", reported) == (
        pytest.approx(0.8))
    assert default_compute_score("openenv/GuessEnvironment", "", "", {}) == 0.0
    assert has_scorer("openenv/anything")


def test_verifiers_scores_the_rubrics_reward_at_the_end():
    reported = {"rollout_reward_scores": {"user_turn_rewards": [0.0, 0.0, 0.7]}}
    assert default_compute_score("verifiers/vf-guess", "", "", reported) == pytest.approx(0.7)
    assert default_compute_score("verifiers/vf-guess", "", "", {}) == 0.0


def test_families_are_known_and_an_exact_name_wins():
    assert has_scorer("reasoning_gym/anything") and has_scorer("textarena/Wordle-v0")
    assert not has_scorer("reasoning_gym") and scorer_for("openai/gsm8k") is not None
    with pytest.raises(UnknownNameError, match=r"reasoning_gym/<name>"):
        scorer_for("nope/x")
