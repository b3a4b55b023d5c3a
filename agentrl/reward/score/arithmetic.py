"""Scoring of the arithmetic word problems (data_source ``agentrl/arithmetic``).

The answer is the last ``<answer>NUMBER</answer>`` in the response (commas, ``$`` and
spaces ignored). It scores 1.0 when it equals the ground truth (a numeric string written
by ``agentrl.tasks.arithmetic.format_number``: an integer without ``.0``, otherwise rounded
to 4 decimals) within a relative tolerance of 1e-4, else 0.0. Because the ground truth is
rounded to 4 decimals, an absolute difference up to half of that last decimal (5e-5) is
accepted too, so ``0.00123`` matches ``"0.0012"``.
"""

from __future__ import annotations

import math

from agentrl.utils.answer_tags import extract_answer

REL_TOL = 1e-4
ABS_TOL = 5e-5 * (1 + 1e-9)  # half a unit of the 4th decimal, with room for float error


def parse_number(text: str) -> float | None:
    """``" 1,234.5 "`` -> 1234.5; None if it is not one finite number."""
    cleaned = text.strip().replace(",", "").replace("$", "").replace(" ", "")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def compute_score(solution_str: str, ground_truth: str | float) -> float:
    """1.0 if the last answer is numerically equal to ``ground_truth``, else 0.0."""
    answer = extract_answer(solution_str)
    predicted = parse_number(answer) if answer is not None else None
    expected = parse_number(str(ground_truth))
    if expected is None:
        raise ValueError(f"arithmetic ground truth must be a number, got {ground_truth!r}")
    if predicted is None:
        return 0.0
    return 1.0 if math.isclose(predicted, expected, rel_tol=REL_TOL, abs_tol=ABS_TOL) else 0.0
