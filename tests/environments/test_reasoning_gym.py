"""reasoning-gym items as verl rows: distinct questions, the item kept for its own scorer
exactly (types included), so every task's oracle answer scores what reasoning-gym's own
`score_answer` gives on the original item."""

from __future__ import annotations

import json
import logging
import re

import pytest

rg = pytest.importorskip("reasoning_gym")

from reasoning_gym.factory import DATASETS  # noqa: E402

from agentrl.environments.reasoning_gym import load_items, make_rows, prepare  # noqa: E402
from agentrl.reward.score import default_compute_score  # noqa: E402
from agentrl.reward.score.environments import SCORER_ERRORS  # noqa: E402
from agentrl.utils import typed_json  # noqa: E402

# what a model may write instead of the answer: signs, dicts, boards, junk, nothing
MALFORMED = ["", "*", "2*3", "{'a': 1}", "[[1, 2], [3]]", "None", "x" * 300, "1/0",
             "\\frac{1}{2}", "A: True, B: ?", "UP DOWN", "0 1\n1 0"]
# tasks reasoning-gym cannot make from their default config (0.1.25): refused, with why
REFUSED = {"composite": "Must specify at least one dataset"}
# tasks whose items have no oracle answer (0.1.25): the scorer checks the answer itself
NO_ORACLE = {"boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour"}


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


def _score(row, answer):
    return default_compute_score(row["data_source"], f"<answer>{answer}</answer>",
                                 row["reward_model"]["ground_truth"], row["extra_info"])


def test_every_task_prepares_or_is_refused_and_scores_as_reasoning_gym_scores(every_id):
    """3 rows of each registered task, the ones the split test checks (conftest.every_id;
    about 15 s in all on 2 busy cores): the oracle answer in the tags scores what the task's
    own score_answer gives on the item (which prepare checked comes back from typed JSON
    equal, types included), and a malformed answer scores in [0, 1] without raising."""
    prepared, no_oracle = 0, set()
    for spec, result in every_id("reasoning_gym").items():
        task = spec.partition(":")[2]
        if task in REFUSED:
            assert re.fullmatch(f"reasoning_gym:{task} cannot be made from its default "
                                f"config.*{REFUSED[task]}.*", result), task
            continue
        train, test = result
        own = rg.create_dataset(task, size=1, seed=0).score_answer
        for row in train + test:
            item = typed_json.loads(row["extra_info"]["reasoning_gym_entry"])
            assert item["question"] == row["prompt"][1]["content"], task
            if item["answer"] is None:
                no_oracle.add(task)
                assert row["reward_model"]["ground_truth"] is None, task
                assert _score(row, "") == own("", item), task
            else:
                assert row["reward_model"]["ground_truth"] == item["answer"], task
                assert _score(row, item["answer"]) == own(item["answer"].strip(), item), task
            for answer in MALFORMED:
                assert 0.0 <= _score(row, answer) <= 1.0, (task, answer)
        prepared += 1
    assert prepared == len(DATASETS) - len(REFUSED) and no_oracle == NO_ORACLE


def test_tuples_in_an_item_reach_the_scorer_as_tuples():
    """arc_agi compares its grids as tuples: as lists (plain JSON) the oracle scored 0.05."""
    (item,) = load_items("arc_agi", 1, 0)
    (row,) = make_rows("arc_agi", [item], "test")
    assert isinstance(item["metadata"]["output"], tuple)
    assert _score(row, item["answer"]) == 1.0


def test_a_task_without_oracle_answers_says_so(caplog):
    with caplog.at_level(logging.WARNING, logger="agentrl.environments.reasoning_gym"):
        train, test, _ = prepare("rubiks_cube", 2, 1, seed=0)
    assert [r["reward_model"]["ground_truth"] for r in train + test] == [None] * 3
    assert "rubiks_cube has no oracle answer for 2 of 2 items" in caplog.text


def test_a_scorer_that_raises_scores_0_and_is_counted(caplog):
    (row,) = make_rows("prime_factorization", load_items("prime_factorization", 1, 0), "test")
    before = SCORER_ERRORS["prime_factorization"]
    with caplog.at_level(logging.WARNING, logger="agentrl.reward.score.environments"):
        assert _score(row, "2*3") == 0.0  # the task's scorer raises on '*' for 0.1.25
    assert SCORER_ERRORS["prime_factorization"] == before + 1
    if before == 0:
        assert "reasoning_gym/prime_factorization: score_answer raised" in caplog.text


def test_a_task_that_cannot_be_made_is_a_value_error_naming_it(monkeypatch):
    def broken(task, **kwargs):
        raise KeyError("data file")

    monkeypatch.setattr(rg, "create_dataset", broken)
    with pytest.raises(ValueError, match="reasoning_gym:chain_sum cannot be made.*KeyError"):
        load_items("chain_sum", 1, 0)


def test_an_item_it_cannot_carry_exactly_is_refused():
    item = {"question": "q", "answer": "1", "metadata": {"source_dataset": "chain_sum",
                                                         "grid": object()}}
    with pytest.raises(ValueError, match=r"reasoning_gym:chain_sum: item\['metadata'\]\['grid'\]"):
        make_rows("chain_sum", [item], "test")


@pytest.mark.parametrize(("typo", "meant"), [("basic_arith", "basic_arithmetic"),
                                             ("basic_arithmetc", "basic_arithmetic"),
                                             ("sudoku_mini", "mini_sudoku"),
                                             ("chainsum", "chain_sum")])
def test_an_unknown_task_suggests_close_names(typo, meant):
    with pytest.raises(ValueError, match=f"no task '{typo}'; did you mean .*{meant}"):
        load_items(typo, 5, 0)


def test_a_task_with_too_few_distinct_questions_says_so(monkeypatch):
    import reasoning_gym

    item = {"question": "same?", "answer": "1", "metadata": {"source_dataset": "chain_sum"}}
    monkeypatch.setattr(reasoning_gym, "create_dataset", lambda *a, **k: [item] * 100)
    with pytest.raises(ValueError, match="1 distinct questions .* fewer than the 5"):
        load_items("chain_sum", 5, 0)
