"""Search-R1 QA: SQuAD-normalised exact match of the last <answer>, and the format variant."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.reward.score.search_r1 import (
    compute_score_em,
    compute_score_format,
    em_check,
    extract_answer,
    is_retrieval_correct,
    is_valid_format,
    normalize_answer,
    subem_check,
)

GT = {"target": ["Beijing", "Peking"]}


def test_normalize_answer_is_squads():
    assert normalize_answer("  The Eiffel   Tower. ") == "eiffel tower"
    assert normalize_answer("An apple, a PEAR!") == "apple pear"


def test_em_over_list_array_and_string_targets():
    assert em_check("the beijing", GT)
    assert em_check("Peking.", {"target": np.array(["Beijing", "Peking"], dtype=object)})
    assert em_check("beijing", "Beijing")
    assert not em_check("Beijing city", GT)
    assert subem_check("Beijing city", GT)


def test_missing_target_is_named():
    with pytest.raises(KeyError, match="'target'"):
        em_check("x", {"answer": "x"})


def test_last_answer_span_counts():
    text = "<answer>Paris</answer> hmm, wait.\n<answer> Beijing </answer>"
    assert extract_answer(text) == "Beijing"
    assert compute_score_em(text, GT) == 1.0
    assert compute_score_em("<answer>Paris</answer>", GT) == 0.0
    assert compute_score_em("<answer>Paris</answer>", GT, format_score=0.1) == 0.1
    assert compute_score_em("Beijing", GT) == 0.0  # no answer tags


RETRIEVED = (
    "<search>capital of china</search>\n<tool_response>Beijing is the capital.</tool_response>\n"
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>easy</think>" + RETRIEVED + "<answer>Beijing</answer>", 1.0),  # well formed
        ("<answer>Beijing</answer> trailing words", 0.8),  # correct, malformed: 1 - 0.2
        (RETRIEVED + "<answer>Shanghai</answer>", 0.3),  # wrong, well formed, retrieved: 0.2 + 0.1
        ("<search>q</search><answer>Shanghai</answer>", 0.2),  # wrong, well formed
        ("<think><answer>Shanghai</answer></think>", 0.1),  # wrong, nested tags
        ("<think>no answer", 0.0),  # malformed, no answer
    ],
)
def test_format_variant(text, expected):
    assert compute_score_format("searchR1_nq", text, GT) == pytest.approx(expected)


def test_format_checks():
    assert is_valid_format("<think>a</think><answer>b</answer>  \n")
    assert not is_valid_format("<think>a<answer>b</answer></think>")  # nested
    assert not is_valid_format("<think>a</think>")  # no answer
    assert not is_valid_format("<answer>b</answer><think>")  # dangling
    assert is_retrieval_correct("<information>... Peking ...</information>", GT)
    assert not is_retrieval_correct("Beijing outside any block", GT)
