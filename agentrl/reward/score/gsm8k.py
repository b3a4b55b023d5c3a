"""GSM8K scoring (data_source ``openai/gsm8k``), the rule verl uses.

GSM8K solutions end with ``#### <number>``. Two ways to read the model's answer from the
last 300 characters of the response (long strings make the regex slow, and the answer is
at the end):

- ``strict``: the last ``#### <number>``, commas and ``$`` removed (tests the format too);
- ``flexible``: the last number anywhere; unlike verl we also remove commas and a trailing
  period, so ``"... is 1,200."`` reads as ``1200``.

The answer must equal the ground-truth string exactly: ``score`` (1.0) if it does,
``format_score`` (0.0) if an answer was found but differs, 0.0 if none was found.
"""

from __future__ import annotations

import re

_CLIP_CHARS = 300
_STRICT = re.compile(r"#### (-?[0-9.,]+)")
_NUMBER = re.compile(r"-?[0-9.,]+")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The answer the response gives, or None; ``method`` is ``strict`` or ``flexible``."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"gsm8k method must be 'strict' or 'flexible', got {method!r}")
    tail = solution_str[-_CLIP_CHARS:]
    if method == "strict":
        found = _STRICT.findall(tail)
        return found[-1].replace(",", "").replace("$", "") if found else None
    for candidate in reversed(_NUMBER.findall(tail)):
        cleaned = candidate.replace(",", "").rstrip(".")
        if cleaned not in ("", "-"):
            return cleaned
    return None


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """``score`` if the extracted answer equals ``ground_truth``, else ``format_score`` or 0."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return float(score) if answer == str(ground_truth).strip() else float(format_score)
