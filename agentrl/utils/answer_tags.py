"""The final answer of a response: agentrl's ``<answer>...</answer>`` format.

    extract_answer("I think <answer>7</answer>... no, <answer>8</answer>")   # "8"
"""

from __future__ import annotations

import re


def extract_answer(text: str, tag: str = "answer") -> str | None:
    """The text of the last ``<tag>...</tag>`` in ``text``, stripped; None if there is none."""
    found = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, re.DOTALL)
    return found[-1].strip() if found else None


__all__ = ["extract_answer"]
