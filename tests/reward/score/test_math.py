"""MATH: last-boxed extraction, Hendrycks normalisation, optional math-verify."""

from __future__ import annotations

import sys
import types

import pytest

from agentrl.reward.score.math import (
    compute_score,
    is_equiv,
    last_boxed_only_string,
    remove_boxed,
    strip_string,
)


def test_last_boxed_with_nested_braces():
    text = r"first \boxed{1} then \boxed{\frac{1}{\sqrt{2}}} done"
    assert last_boxed_only_string(text) == r"\boxed{\frac{1}{\sqrt{2}}}"
    assert remove_boxed(r"\boxed{\frac{1}{\sqrt{2}}}") == r"\frac{1}{\sqrt{2}}"


def test_boxed_forms():
    assert remove_boxed(last_boxed_only_string(r"so $\boxed 5$.")) == "5"
    assert remove_boxed(last_boxed_only_string(r"\fbox{7}")) == "7"
    assert last_boxed_only_string(r"\boxed{1") is None  # unbalanced
    assert last_boxed_only_string("no box") is None


@pytest.mark.parametrize(
    "answer, truth",
    [
        (r"\frac12", r"\frac{1}{2}"),
        ("0.5", r"\frac{1}{2}"),
        ("3/4", r"\frac{3}{4}"),
        ("x = 5", "5"),
        (r"10^{\circ}", "10"),
        (r"\dfrac{\sqrt3}{2}", r"\frac{\sqrt{3}}{2}"),
        (r"5 \text{ cm}", "5"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        (r"50\%", "50"),
        (".5", "0.5"),
    ],
)
def test_equivalent_after_normalisation(answer, truth):
    assert is_equiv(answer, truth)


def test_not_equivalent(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # the normalisation alone
    assert not is_equiv("2/4", r"\frac{1}{2}")
    assert not is_equiv("x = 5", "6")
    assert strip_string(r"\frac1") == r"\frac1"  # too short to fix: left as is


def test_compute_score_uses_the_last_box():
    assert compute_score(r"try \boxed{3}, no: \boxed{\frac{1}{2}}", "0.5") == 1.0
    assert compute_score(r"\boxed{3} was wrong", "4") == 0.0
    assert compute_score("no box at all: 4", "4") == 0.0


def test_math_verify_decides_when_installed(monkeypatch):
    calls = []
    fake = types.ModuleType("math_verify")
    fake.parse = lambda text: text
    fake.verify = lambda gold, pred: calls.append((gold, pred)) or True
    monkeypatch.setitem(sys.modules, "math_verify", fake)
    assert compute_score(r"\boxed{2/4}", r"\frac{1}{2}") == 1.0
    assert calls == [(r"\boxed{\frac{1}{2}}", r"\boxed{2/4}")]
    calls.clear()
    assert compute_score(r"\boxed{0.5}", r"\frac{1}{2}") == 1.0  # equal strings: not asked
    assert calls == []
