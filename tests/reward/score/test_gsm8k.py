"""GSM8K answer extraction (strict and flexible) and scoring."""

from __future__ import annotations

import pytest

from agentrl.reward.score.gsm8k import compute_score, extract_solution


def test_strict_takes_the_last_hash_answer_without_commas():
    text = "First #### 3 was a draft. So 1,000 + 234 = 1,234.\n#### 1,234"
    assert extract_solution(text) == "1234"
    assert compute_score(text, "1234") == 1.0


def test_strict_needs_the_hash_marker():
    assert extract_solution("The answer is 72.") is None
    assert compute_score("The answer is 72.", "72") == 0.0


def test_wrong_answer_gets_the_format_score():
    assert compute_score("#### 71", "72") == 0.0
    assert compute_score("#### 71", "72", format_score=0.1) == 0.1
    assert compute_score("#### 72", "72", score=2.0) == 2.0


def test_only_the_last_300_characters_are_read():
    text = "#### 72" + " filler" * 60  # 420 characters after the answer
    assert extract_solution(text) is None


def test_flexible_takes_the_last_number():
    assert extract_solution("6 * 12 gives 1,200.", method="flexible") == "1200"
    assert extract_solution("-5 degrees", method="flexible") == "-5"
    assert extract_solution("no digits here.", method="flexible") is None
    assert compute_score("so it is 72.", "72", method="flexible") == 1.0


def test_unknown_method_is_an_error():
    with pytest.raises(ValueError, match="'strict' or 'flexible'"):
        extract_solution("#### 1", method="loose")
