"""A reward for the dynamic-sampling test: prompts whose row index is 0 or 3 get 0, 1, 0,
1, ... over their samples (a group that varies); every other prompt gets 0 (a group that
does not). Counted per prompt, so the result does not depend on sampling."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

_calls: dict[int, int] = defaultdict(int)
INFORMATIVE = {0, 3}


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None
) -> dict:
    index = int(extra_info["index"])
    if index not in INFORMATIVE:
        return {"score": 0.0, "acc": 0.0}
    _calls[index] += 1
    value = float(_calls[index] % 2)
    return {"score": value, "acc": value}
