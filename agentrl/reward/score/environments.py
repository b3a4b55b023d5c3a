"""Scorers that hand the answer to a foreign environment's own scoring (never re-implemented).

- ``reasoning_gym/<task>``: the last ``<answer>...</answer>`` of the response (the tag is
  ``extra_info.answer_tag``, default ``answer``) goes to reasoning-gym's ``score_answer`` for
  the task, with the item the row was made from (``extra_info.reasoning_gym_entry``, its
  typed JSON, ``agentrl.utils.typed_json``, so tuples and int keys are as the task made them).
  No answer scores 0.0, as reasoning-gym scores a missing answer; a scorer that raises on
  the answer (a malformed board, an unexpected sign) scores 0.0 too, as reasoning-gym's
  scorers score what they cannot read, and is counted per task (``SCORER_ERRORS``) and logged.
- ``textarena/<env_id>``: the game's own reward, which the TextArena interaction
  (``agentrl.interactions.textarena``) reported as the score of its last turn
  (``extra_info.rollout_reward_scores.user_turn_rewards``); a trajectory that never reached
  the game's end scores 0.0.
- ``verifiers/<env>``: the environment's rubric reward, which the verifiers interaction
  (``agentrl.interactions.verifiers``) reported as the score of its last turn; a trajectory
  the environment never scored scores 0.0.
- ``openenv/<name>``: the episode's return, the sum of the step rewards the OpenEnv
  interaction (``agentrl.interactions.openenv``) reported as its turn scores; an episode
  that never stepped scores 0.0.

Rows come from ``agentrl env prepare`` (docs/environments.md). A missing package names the
extra to install (``pip install agentrl[envs]``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from functools import cache
from typing import Any

from agentrl.utils import typed_json
from agentrl.utils.answer_tags import ANSWER_TAG, extract_answer
from agentrl.utils.extras import missing_package

logger = logging.getLogger(__name__)

# reasoning-gym task -> answers its score_answer raised on in this process (scored 0.0)
SCORER_ERRORS: Counter[str] = Counter()


@cache  # reasoning-gym's scorer of each task, looked up once
def _score_answer_fn(task: str) -> Any:
    try:
        import reasoning_gym
    except ImportError as err:
        raise missing_package("reasoning-gym", "envs", f"data_source reasoning_gym/{task}") from err
    return reasoning_gym.get_score_answer_fn(task)


def reasoning_gym_score(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    """reasoning-gym's own score of the row's item for the response's final answer."""
    info = dict(extra_info or {})
    if "reasoning_gym_entry" not in info:
        raise ValueError("a reasoning_gym row needs extra_info.reasoning_gym_entry (the item's "
                         "JSON, as agentrl env prepare writes it)")
    entry = typed_json.loads(info["reasoning_gym_entry"])
    answer = extract_answer(solution_str, str(info.get("answer_tag") or ANSWER_TAG))
    if answer is None:
        return 0.0
    task = entry["metadata"]["source_dataset"]
    score_answer = _score_answer_fn(task)
    try:
        return float(score_answer(answer, entry))
    except Exception as err:  # the task's scorer on an answer it cannot read
        SCORER_ERRORS[task] += 1
        count = SCORER_ERRORS[task]
        if count & (count - 1) == 0:  # the 1st, 2nd, 4th, ... time: a trace, not a flood
            logger.warning("reasoning_gym/%s: score_answer raised %s: %s on answer %.80r "
                           "(scored 0.0; %d time(s) in this process)", task,
                           type(err).__name__, err, answer, count)
        return 0.0


def _turn_rewards(extra_info: dict | None) -> list[float]:
    scores = (extra_info or {}).get("rollout_reward_scores") or {}
    turns = scores.get("user_turn_rewards") if isinstance(scores, Mapping) else None
    return [] if turns is None else [float(t) for t in turns]


def textarena_score(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    """The game's reward at its end, as the TextArena interaction reported it."""
    turns = _turn_rewards(extra_info)
    return turns[-1] if turns else 0.0


def openenv_score(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    """The episode's return: the sum of the step rewards the OpenEnv interaction reported."""
    return float(sum(_turn_rewards(extra_info)))


def verifiers_score(solution_str: str, ground_truth: Any, extra_info: dict | None) -> float:
    """The environment's rubric reward, as the verifiers interaction reported it at the end."""
    turns = _turn_rewards(extra_info)
    return turns[-1] if turns else 0.0


__all__ = ["openenv_score", "reasoning_gym_score", "textarena_score", "verifiers_score"]
