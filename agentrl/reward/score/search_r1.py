"""Search-R1 QA scoring: exact match of the last ``<answer>...</answer>`` (Jin et al. 2025,
"Search-R1", arXiv:2503.09516), for NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, MuSiQue, Bamboogle.

The ground truth is ``{"target": [answers...]}`` (a list, a numpy array after a parquet
round trip, or one string). Both sides are normalised as in SQuAD (lower case, punctuation
and the articles a/an/the removed, whitespace collapsed); any target that equals the answer
scores 1.

Unlike Search-R1's original scorer, which required two ``<answer>`` spans because its
solution string included the prompt's example, the response alone is scored here, so
one span suffices (verl's ``search_r1_like_qa_em`` does the same).

``compute_score_format`` is the format-aware variant of Search-R1's ``qa_em_format``:
partial credit for a well-formed trajectory and for retrieving the answer. A trajectory is
well formed when its tags (``think``, ``search``, ``information``, ``answer``,
``tool_call``, ``tool_response``) never nest or dangle and it ends with ``</answer>``.
Retrieval is correct when a target appears in an ``<information>`` or ``<tool_response>``
block. Use it as a custom reward function::

    custom_reward_function.path=agentrl.reward.score.search_r1
    custom_reward_function.name=compute_score_format
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

import numpy as np

from agentrl.utils.answer_tags import extract_answer

_TAG = re.compile(r"<(/?)(think|search|information|answer|tool_call|tool_response)>")
_RETRIEVED = re.compile(
    r"<(information|tool_response)>(.*?)</\1>",
    re.DOTALL,
)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower, strip punctuation and articles, collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def targets(ground_truth: Any) -> list[str]:
    """The list of acceptable answers in a ground truth (``{"target": ...}`` or the targets)."""
    if isinstance(ground_truth, Mapping):
        if "target" not in ground_truth:
            raise KeyError(f"QA ground truth needs a 'target' key, got keys {list(ground_truth)}")
        ground_truth = ground_truth["target"]
    if isinstance(ground_truth, str):
        return [ground_truth]
    if isinstance(ground_truth, (list, tuple, np.ndarray)):
        return [str(t) for t in ground_truth]
    return [str(ground_truth)]


def em_check(prediction: str, golden_answers: Any) -> bool:
    """Whether the normalised prediction equals a normalised golden answer."""
    pred = normalize_answer(prediction)
    return any(normalize_answer(gold) == pred for gold in targets(golden_answers))


def subem_check(prediction: str, golden_answers: Any) -> bool:
    """Whether a normalised golden answer is a substring of the normalised prediction."""
    pred = normalize_answer(prediction)
    return any(normalize_answer(gold) in pred for gold in targets(golden_answers))


def compute_score_em(
    solution_str: str, ground_truth: Any, format_score: float = 0.0, score: float = 1.0
) -> float:
    """``score`` on an exact match, ``format_score`` for a wrong answer, 0 without one."""
    answer = extract_answer(solution_str)
    if answer is None:
        return 0.0
    return float(score) if em_check(answer, ground_truth) else float(format_score)


def compute_score_verl(
    solution_str: str,
    ground_truth: Any,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """verl's ``search_r1_like_qa_em.compute_score``: exact match of the last ``<answer>``,
    a quarter of ``score`` when the response holds more than 10 opening or closing answer
    tags (answer spamming). ``method`` is accepted and unused, as in verl."""
    result = compute_score_em(solution_str, ground_truth, format_score, score)
    spammed = max(solution_str.count("<answer>"), solution_str.count("</answer>")) > 10
    return result / 4 if spammed and result == float(score) else result


def is_valid_format(solution_str: str) -> bool:
    """Tags never nest or dangle, there is an answer, and nothing follows the last one."""
    open_tag = None
    for match in _TAG.finditer(solution_str):
        closing, name = match.group(1) == "/", match.group(2)
        if not closing and open_tag is None:
            open_tag = name
        elif closing and open_tag == name:
            open_tag = None
        else:
            return False
    if open_tag is not None:
        return False
    end = solution_str.rstrip()
    return end.endswith("</answer>")


def is_retrieval_correct(solution_str: str, ground_truth: Any) -> bool:
    """Whether a target appears in a retrieved (``information``/``tool_response``) block."""
    blocks = [normalize_answer(m.group(2)) for m in _RETRIEVED.finditer(solution_str)]
    golds = [normalize_answer(g) for g in targets(ground_truth)]
    return any(gold and gold in block for block in blocks for gold in golds)


def compute_score_format(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    structure_format_score: float = 0.2,
    final_format_score: float = 0.1,
    retrieval_score: float = 0.1,
    score: float = 1.0,
) -> float:
    """Search-R1's format-aware reward (a custom ``compute_score``).

    correct answer: ``score`` if well formed, else ``score - structure_format_score``;
    wrong or no answer, well formed: ``structure_format_score`` (+ ``retrieval_score`` if a
    target was retrieved); wrong answer, malformed: ``final_format_score``; else 0.
    """
    valid = is_valid_format(solution_str)
    answer = extract_answer(solution_str)
    if answer is not None and em_check(answer, ground_truth):
        return float(score) if valid else float(score - structure_format_score)
    if valid:
        retrieved = is_retrieval_correct(solution_str, ground_truth)
        return float(structure_format_score + (retrieval_score if retrieved else 0.0))
    return float(final_format_score) if answer is not None else 0.0
