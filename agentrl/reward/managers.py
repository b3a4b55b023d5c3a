"""The built-in reward managers: ``naive``, ``dapo`` and ``batch`` (verl's three).

- ``naive``: ``compute_score`` once per sample.
- ``dapo``: like naive, plus DAPO's overlong reward shaping (Yu et al. 2025,
  arXiv:2503.14476, "soft overlong punishment"): with ``L = max_resp_len`` and buffer
  ``b = overlong_buffer_cfg.len``, a response of ``n`` tokens gets
  ``min(0, -(n - (L - b)) / b * penalty_factor)`` added: nothing up to ``L - b`` tokens,
  then a penalty growing linearly to ``-penalty_factor`` at ``L``. ``n`` counts every
  attended response token (tool tokens too: they use the same budget). A plain float score
  is also reported as ``acc``.
- ``batch``: one call for the whole batch, ``compute_score(data_sources=[...],
  solution_strs=[...], ground_truths=[...], extra_infos=[...], **reward_kwargs) -> list``;
  the function may be ``async``. When the call raises an infrastructure failure every
  sample gets it; when it raises anything else each sample is scored again alone, so only
  the samples the function raises on fail.

A sample whose score function raised gets a ``ScoreFailure`` (agentrl/reward/base.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.protocol import DATA_SOURCE_KEY
from agentrl.reward.base import (
    RewardManager,
    RewardScoreError,
    Sample,
    ScoreFailure,
    register_reward_manager,
)
from agentrl.reward.score import default_compute_score
from agentrl.utils.aio import run_sync


@register_reward_manager("naive")
class NaiveRewardManager(RewardManager):
    """Scores each sample with ``compute_score(data_source, solution_str, ground_truth,
    extra_info)``."""

    def score(self, samples: Sequence[Sample]) -> list[Any]:
        results = []
        for s in samples:
            try:
                results.append(
                    self.compute_score(
                        data_source=s.data_source,
                        solution_str=s.response_str,
                        ground_truth=s.ground_truth,
                        extra_info=s.extra_info,
                    )
                )
            except Exception as err:
                where = f"sample {s.index} (data_source={s.data_source!r})"
                results.append(ScoreFailure.of(err, where))
        return results


@dataclass(frozen=True)
class OverlongBuffer:
    """``reward_kwargs.overlong_buffer_cfg``: the DAPO soft overlong penalty."""

    enable: bool = False
    len: int = 0
    penalty_factor: float = 1.0
    log: bool = False


@register_reward_manager("dapo")
class DAPORewardManager(NaiveRewardManager):
    """Naive scoring plus the DAPO overlong penalty (see the module docstring)."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = DATA_SOURCE_KEY,
        tool_reward_weight: float = 0.0,
        step_reward_weight: float = 0.0,
        max_resp_len: int | None = None,
        overlong_buffer_cfg: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, tool_reward_weight,
                         step_reward_weight)
        self.overlong = OverlongBuffer(**dict(overlong_buffer_cfg or {}))
        self.max_resp_len = max_resp_len
        if self.overlong.enable:
            if max_resp_len is None:
                raise ValueError(
                    "reward_kwargs.max_resp_len is needed with overlong_buffer_cfg.enable"
                )
            if not 0 < self.overlong.len <= max_resp_len:
                raise ValueError(
                    f"overlong_buffer_cfg.len must be in (0, max_resp_len={max_resp_len}], "
                    f"got {self.overlong.len}"
                )

    def shape_reward(self, sample: Sample, score: float, info: dict[str, Any]) -> float:
        if not info:  # a plain float score
            info["acc"] = score
        if not self.overlong.enable:
            return score
        buffer = self.overlong.len
        exceed = sample.response_length - (self.max_resp_len - buffer)
        penalty = min(-exceed / buffer * self.overlong.penalty_factor, 0.0)
        if self.overlong.log:
            info["overlong_reward"] = penalty
            info["overlong"] = penalty < 0
        return score + penalty


def batched_default_compute_score(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict],
    **score_kwargs: Any,
) -> list[Any]:
    """``default_compute_score`` over a batch (the ``batch`` manager's default);
    ``score_kwargs`` (the sandbox settings) go to every call."""
    return [
        default_compute_score(ds, sol, gt, extra, **score_kwargs)
        for ds, sol, gt, extra in zip(
            data_sources, solution_strs, ground_truths, extra_infos, strict=True
        )
    ]


@register_reward_manager("batch")
class BatchRewardManager(RewardManager):
    """Calls a batched (optionally async) ``compute_score`` once per batch."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = DATA_SOURCE_KEY,
        tool_reward_weight: float = 0.0,
        step_reward_weight: float = 0.0,
        **reward_kwargs: Any,
    ) -> None:
        super().__init__(
            tokenizer,
            num_examine,
            compute_score or batched_default_compute_score,
            reward_fn_key,
            tool_reward_weight,
            step_reward_weight,
        )
        self.reward_kwargs = reward_kwargs

    def score(self, samples: Sequence[Sample]) -> list[Any]:
        try:
            return self._call(samples)
        except RewardScoreError:
            raise
        except Exception as err:
            sources = sorted({s.data_source for s in samples})
            failure = ScoreFailure.of(err, f"{len(samples)} samples (data_sources {sources})")
        if failure.infra or len(samples) == 1:
            return [failure] * len(samples)
        results: list[Any] = []
        for sample in samples:  # find the samples it raises on
            try:
                results.extend(self._call([sample]))
            except RewardScoreError:
                raise
            except Exception as err:
                where = f"sample {sample.index} (data_source={sample.data_source!r})"
                results.append(ScoreFailure.of(err, where))
        return results

    def _call(self, samples: Sequence[Sample]) -> list[Any]:
        """One call of the batched function on ``samples``."""
        results = self.compute_score(
            data_sources=[s.data_source for s in samples],
            solution_strs=[s.response_str for s in samples],
            ground_truths=[s.ground_truth for s in samples],
            extra_infos=[s.extra_info for s in samples],
            **self.reward_kwargs,
        )
        if inspect.isawaitable(results):
            results = run_sync(results)
        results = list(results)
        if len(results) != len(samples):
            raise RewardScoreError(f"got {len(results)} scores for {len(samples)} samples")
        return results
