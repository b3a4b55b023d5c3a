"""reasoning-gym items as verl rows: distinct questions, the item kept for its own scorer."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("reasoning_gym")

from agentrl.environments.reasoning_gym import load_items, make_rows, prepare  # noqa: E402
from agentrl.reward.score import default_compute_score  # noqa: E402


def test_train_and_test_never_share_a_question_and_the_seed_repeats():
    train, test, extra = prepare("basic_arithmetic", 60, 20, seed=4)
    assert extra == {} and len(train) == 60 and len(test) == 20
    questions = [r["extra_info"]["question"] for r in train + test]
    assert len(set(questions)) == 80
    again, _, _ = prepare("basic_arithmetic", 60, 20, seed=4)
    assert again == train
    other, _, _ = prepare("basic_arithmetic", 60, 20, seed=5)
    assert other != train


def test_rows_carry_the_item_and_score_with_its_answer():
    (row,) = make_rows("chain_sum", load_items("chain_sum", 1, 0), "test", answer_tag="final")
    assert row["data_source"] == "reasoning_gym/chain_sum"
    assert "<final></final>" in row["prompt"][0]["content"]
    entry = json.loads(row["extra_info"]["reasoning_gym_entry"])
    assert entry["question"] == row["prompt"][1]["content"]
    right = f"<final>{row['reward_model']['ground_truth']}</final>"
    args = (row["data_source"], right, row["reward_model"]["ground_truth"], row["extra_info"])
    assert default_compute_score(*args) == 1.0


def test_an_unknown_task_suggests_close_names():
    with pytest.raises(ValueError, match="no task 'basic_arith'.*basic_arithmetic"):
        load_items("basic_arith", 5, 0)


def test_a_task_with_too_few_distinct_questions_says_so(monkeypatch):
    import reasoning_gym

    item = {"question": "same?", "answer": "1", "metadata": {"source_dataset": "chain_sum"}}
    monkeypatch.setattr(reasoning_gym, "create_dataset", lambda *a, **k: [item] * 100)
    with pytest.raises(ValueError, match="1 distinct questions .* fewer than the 5"):
        load_items("chain_sum", 5, 0)
