"""The final answer of a response: agentrl's ``<answer>...</answer>`` format.

    extract_answer("I think <answer>7</answer>... no, <answer>8</answer>")   # "8"
    answer_or_reply("[5]")                                                   # "[5]"
"""

from __future__ import annotations

import re

ANSWER_TAG = "answer"  # the tag a final answer goes in, unless a task names another


def extract_answer(text: str, tag: str = ANSWER_TAG) -> str | None:
    """The text of the last ``<tag>...</tag>`` in ``text``, stripped; None if there is none."""
    found = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, re.DOTALL)
    return found[-1].strip() if found else None


def answer_or_reply(reply: str, tag: str | None = ANSWER_TAG) -> str:
    """A game move or environment action in a model reply: the last ``<tag>`` answer's
    text, else the whole reply stripped (``tag`` None: always the whole reply)."""
    if tag is not None:
        found = extract_answer(reply, tag)
        if found is not None:
            return found
    return reply.strip()


__all__ = ["ANSWER_TAG", "answer_or_reply", "extract_answer"]
