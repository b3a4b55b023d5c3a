"""Arithmetic: the last <answer>NUMBER</answer> against the 4-decimal ground truth."""

from __future__ import annotations

import pytest

from agentrl.reward.score.arithmetic import compute_score, parse_number


@pytest.mark.parametrize(
    "response, truth, expected",
    [
        ("<answer>42</answer>", "42", 1.0),
        ("<answer> 1,234 </answer>", "1234", 1.0),
        ("<answer>-12.5</answer>", "-12.5", 1.0),
        ("<answer>42.0</answer>", "42", 1.0),
        ("<answer>0.33333333</answer>", "0.3333", 1.0),  # |diff| / 0.3333 = 1e-5 <= 1e-4
        ("<answer>0.334</answer>", "0.3333", 0.0),  # relative difference 2.1e-3
        ("<answer>0.00123</answer>", "0.0012", 1.0),  # |diff| = 3e-5 <= 5e-5 (rounding)
        ("<answer>0.0013</answer>", "0.0012", 0.0),  # |diff| = 1e-4
        ("<answer>41</answer> no wait <answer>42</answer>", "42", 1.0),  # the last counts
        ("<answer>42</answer> no wait <answer>41</answer>", "42", 0.0),
        ("<answer>forty-two</answer>", "42", 0.0),
        ("<answer>nan</answer>", "42", 0.0),
        ("42", "42", 0.0),  # no answer tags
    ],
)
def test_compute_score(response, truth, expected):
    assert compute_score(response, truth) == expected


def test_parse_number():
    assert parse_number(" $1,000.5 ") == 1000.5
    assert parse_number("inf") is None
    assert parse_number("1/2") is None


def test_bad_ground_truth_is_an_error():
    with pytest.raises(ValueError, match="ground truth must be a number, got 'abc'"):
        compute_score("<answer>1</answer>", "abc")
