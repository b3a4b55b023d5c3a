"""The example's scorer: a `compute_score` for rows of data_source "guess_number".

    custom_reward_function.path=examples/custom_tool/reward.py     # name: compute_score

No built-in scorer knows "guess_number", so the run names this one (as any user does for a
data source of their own, docs/rewards.md). It combines what the tool saw with what the
model said: half of the score is the tool's own reward for the trajectory (``calc_reward``:
1.0 for finding the number at the first guess, 0.1 less per extra guess, 0 when not found),
which reaches a score function as ``extra_info["rollout_reward_scores"]["guess_number"]``;
the other half is 1 when the last whole number of the response is the secret (the answer).
"""

from __future__ import annotations

import re
from typing import Any

TOOL = "guess_number"
_INTEGER = re.compile(r"-?\d+")


def tool_reward(extra_info: dict | None) -> float:
    """The tool's ``calc_reward`` for this trajectory (a list when it was created twice)."""
    value = ((extra_info or {}).get("rollout_reward_scores") or {}).get(TOOL, 0.0)
    return float(sum(value)) if isinstance(value, (list, tuple)) else float(value or 0.0)


def compute_score(data_source: str, solution_str: str, ground_truth: Any,
                  extra_info: dict | None = None) -> dict[str, float]:
    """``{"score", "found", "answered"}``; ``score = 0.5 * found + 0.5 * answered``."""
    numbers = _INTEGER.findall(solution_str)
    answered = float(bool(numbers) and int(numbers[-1]) == int(ground_truth))
    found = tool_reward(extra_info)
    return {"score": 0.5 * found + 0.5 * answered, "found": found, "answered": answered}
