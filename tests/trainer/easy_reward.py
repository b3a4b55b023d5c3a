"""A reward a random tiny model can learn in a few GRPO steps (tests/trainer/test_learning.py):
the share of the letters of the response that are in the first half of the alphabet. Dense
(every response has a value near 0.5 at the start, with spread inside a group) and reachable
by shifting the output distribution, so only a broken training path leaves it flat."""

from __future__ import annotations

from typing import Any


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None
) -> float:
    letters = [c for c in solution_str.lower() if "a" <= c <= "z"]
    return sum(c <= "m" for c in letters) / len(letters) if letters else 0.0
