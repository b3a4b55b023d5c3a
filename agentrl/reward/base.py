"""The reward-manager base class: decode responses, score them, place rewards on tokens.

A reward manager turns a rollout batch into token-level scores::

    manager(data: DataProto, return_dict=False)
    -> reward_tensor (B, R) float32
       or {"reward_tensor": ..., "reward_extra_info": {key: [one value per sample]}}

It reads ``batch["responses"]`` (B, R) right-padded and ``batch["attention_mask"]``
(B, P + R), ``non_tensor_batch[reward_fn_key]`` (the data source),
``non_tensor_batch["reward_model"][i]["ground_truth"]``, ``non_tensor_batch["extra_info"]``
(optional) and ``non_tensor_batch["reward_scores"]`` (optional: per sample
``{tool_name: float or [floats]}``, the tool rewards the rollout collected).

For each sample: the attended response tokens are decoded with
``skip_special_tokens=True``, scored by ``compute_score(data_source, solution_str,
ground_truth, extra_info)`` (a float, or a dict with key ``score`` whose other keys go to
``reward_extra_info``; ``extra_info`` also carries verl's ``num_turns`` and
``rollout_reward_scores``, the tool rewards), the sum of the tool rewards times
``tool_reward_weight`` is added (default 0, as verl: the tool rewards reach the score only
through ``compute_score`` or that weight),
and the result is written on the last attended response token; every other position is 0,
except that with ``step_reward_weight`` the rollout's per-turn tool step rewards
(``batch["step_rewards"]`` (B, R), at the last token of the turn that made the call) are
added where they stand, for turn-level credit assignment.
In a multi-turn trajectory that ended with a tool response that last token is a tool token;
the advantage estimators credit it to the last assistant token before it.

When the batch has ``rm_scores`` (``reward_model.enable``: a learned reward model scored it,
agentrl/workers/reward_model.py), they are the reward, as in verl: ``compute_score`` is not
called.

A score function that raises on a sample does not stop the run (docs/rewards.md, "When
scoring fails"): the managers put a ``ScoreFailure`` in its place and the sample scores 0.
When the exception is an infrastructure failure (``InfraError``, a timeout, a connection
error: agentrl/utils/infra.py), or the function returned a dict with ``infra_error`` (the
reason), the sample's extra info carries ``infra_error`` (kind ``scorer``) and the trainer
treats it per ``rollout.on_infra_error``; any other exception is the model output's doing (a
scorer raising on an odd answer): the sample scores 0 and trains as such, its extra info
carries ``score_error`` (the exception) and it is counted in ``reward/score_failed`` and
``reward/score_failed/<data_source>``. A data source without a score function, a result
count that does not match, or a result that is neither a number nor a dict with ``score``
are configuration errors: ``RewardScoreError``.

Subclasses implement ``score(samples)`` and may override ``shape_reward``. Register them by
name with ``register_reward_manager``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentrl.protocol import (
    DATA_SOURCE_KEY,
    INFRA_ERROR_KEY,
    STEP_REWARDS_KEY,  # noqa: F401 - re-exported
)
from agentrl.reward.score import default_compute_score
from agentrl.utils.infra import is_infra_error
from agentrl.utils.registry import Registry, UnknownNameError

logger = logging.getLogger(__name__)

REWARD_MANAGERS: Registry[type] = Registry("reward manager")


def scores_on_last_token(
    scores: Sequence[float], attention_mask: torch.Tensor, response_length: int
) -> torch.Tensor:
    """(B, R) float32 zeros with row i's score on its last attended response token (a row
    without response tokens gets none): how a trajectory's one score (a reward model's, an
    agent function's) becomes ``rm_scores``."""
    response_attention = attention_mask[:, -response_length:].bool()  # (B, R)
    out = torch.zeros(response_attention.shape, dtype=torch.float32)
    for row, score in enumerate(scores):
        positions = torch.nonzero(response_attention[row]).squeeze(-1)
        if positions.numel():
            out[row, positions[-1]] = score
    return out


def register_reward_manager(name: str) -> Callable[[type], type]:
    """Class decorator registering a reward manager under ``name`` (duplicates raise)."""
    return REWARD_MANAGERS.register(name)


def get_reward_manager_cls(name: str) -> type:
    """The reward manager class registered as ``name``; unknown names list the valid ones."""
    return REWARD_MANAGERS.get(name)


class RewardScoreError(RuntimeError):
    """A score function cannot score at all (no scorer for a data source) or returned
    something unusable; names the sample."""


# the extra-info key of a sample whose score function raised (not an infrastructure failure)
SCORE_ERROR_KEY = "score_error"
SCORER_KIND = "scorer"  # the infra_error kind of a score function's infrastructure failure


@dataclass(frozen=True)
class ScoreFailure:
    """What a manager's ``score`` returns for a sample whose score function raised."""

    error: str  # "<sample and data source>: <exception type>: <message>"
    infra: bool  # an infrastructure failure (agentrl/utils/infra.py), not the model's

    @classmethod
    def of(cls, err: Exception, where: str) -> ScoreFailure:
        """The failure of ``err``; an unknown data source is a configuration error and
        raises ``RewardScoreError`` instead."""
        if isinstance(err, UnknownNameError):
            raise RewardScoreError(f"compute_score failed on {where}: {err}") from err
        logger.debug("compute_score raised on %s", where, exc_info=err)
        return cls(f"{where}: {type(err).__name__}: {err}", is_infra_error(err))


@dataclass(frozen=True)
class Sample:
    """One decoded trajectory, ready to score."""

    index: int
    data_source: str
    ground_truth: Any
    extra_info: dict
    response_str: str
    response_length: int  # attended response tokens (model and tool tokens)
    last_position: int  # where the reward goes; -1 for an empty response
    tool_reward: float  # sum of the tool rewards, already weighted


def _tool_reward_sum(scores: Any, top_level: bool = True) -> float:
    """Sum of ``{tool: float | [floats]}`` (None or empty -> 0), step rewards left out."""
    if scores is None:
        return 0.0
    if isinstance(scores, Mapping):
        return sum(_tool_reward_sum(v, top_level=False) for k, v in scores.items()
                   if not (top_level and k == STEP_REWARDS_KEY))
    if isinstance(scores, (list, tuple, np.ndarray)):
        return sum(_tool_reward_sum(v, top_level=False) for v in scores)
    return float(scores)


class RewardManager:
    """Base of the reward managers; see the module docstring for the contract."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = DATA_SOURCE_KEY,
        tool_reward_weight: float = 0.0,
        step_reward_weight: float = 0.0,
    ) -> None:
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.tool_reward_weight = float(tool_reward_weight)
        self.step_reward_weight = float(step_reward_weight)

    # ------------------------------------------------------------------ subclass hooks

    def score(self, samples: Sequence[Sample]) -> list[Any]:
        """One ``compute_score`` result (float or dict with ``score``) per sample."""
        raise NotImplementedError

    def shape_reward(self, sample: Sample, score: float, info: dict[str, Any]) -> float:
        """Turn a sample's score into its reward (may add keys to ``info``); default: as is."""
        return score

    # ------------------------------------------------------------------ the call

    def __call__(self, data: Any, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        if "rm_scores" in data.batch.keys():  # a learned reward model scored the batch: as
            rm_scores = data.batch["rm_scores"].float()  # in verl, its score is the reward
            if not return_dict:
                return rm_scores
            return {"reward_tensor": rm_scores,
                    "reward_extra_info": {"rm_score": rm_scores.sum(-1).tolist()}}
        samples = self.decode(data)
        results = self.score(samples)
        if len(results) != len(samples):
            raise RewardScoreError(f"got {len(results)} scores for {len(samples)} samples")
        reward_tensor = torch.zeros(data.batch["responses"].shape, dtype=torch.float32)
        infos: list[dict[str, Any]] = []
        has_tool_rewards = "reward_scores" in data.non_tensor_batch
        for sample, result in zip(samples, results, strict=True):
            if isinstance(result, ScoreFailure):  # scores 0; the trainer sees why (module doc)
                score, info, failure = 0.0, {}, result
            else:
                (score, info), failure = self._split(sample, result), None
            reward = self.shape_reward(sample, score, info)
            if failure is not None:
                key = INFRA_ERROR_KEY if failure.infra else SCORE_ERROR_KEY
                info[key] = failure.error
            if has_tool_rewards:
                info["tool_reward"] = sample.tool_reward
                reward += sample.tool_reward
            if sample.last_position >= 0:
                reward_tensor[sample.index, sample.last_position] = reward
            infos.append(info)
        if self.step_reward_weight and "step_rewards" in data.batch.keys():
            step = self.step_reward_weight * data.batch["step_rewards"].float()  # (B, R)
            reward_tensor += step
            for info, total in zip(infos, step.sum(-1).tolist(), strict=True):
                info["step_reward"] = total
        self._log_examples(data, samples, reward_tensor)
        _log_failures([r for r in results if isinstance(r, ScoreFailure)], len(results))
        if not return_dict:
            return reward_tensor
        return {"reward_tensor": reward_tensor, "reward_extra_info": _collate(infos)}

    # ------------------------------------------------------------------ helpers

    def decode(self, data: Any) -> list[Sample]:
        """Decode every sample's attended response tokens and collect what scoring needs."""
        non_tensor = data.non_tensor_batch
        for key in (self.reward_fn_key, "reward_model"):
            if key not in non_tensor:
                raise KeyError(f"reward manager needs data.non_tensor_batch[{key!r}]")
        responses = data.batch["responses"]  # (B, R)
        response_attention = data.batch["attention_mask"][:, -responses.shape[-1] :].bool()
        return [
            self._sample(i, responses[i], response_attention[i], non_tensor)
            for i in range(responses.shape[0])
        ]

    def _sample(
        self, i: int, response: torch.Tensor, attention: torch.Tensor, non_tensor: dict
    ) -> Sample:
        valid = torch.nonzero(attention).squeeze(-1)  # positions of the attended tokens
        reward_model = non_tensor["reward_model"][i]
        if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
            raise KeyError(f"sample {i}: reward_model must be a dict with 'ground_truth'")
        extra = dict(non_tensor["extra_info"][i] or {}) if "extra_info" in non_tensor else {}
        if "__num_turns__" in non_tensor:  # set by multi-turn rollouts, as in verl
            extra["num_turns"] = non_tensor["__num_turns__"][i]
        tool_scores = non_tensor["reward_scores"][i] if "reward_scores" in non_tensor else None
        # verl's name for the rollout's tool rewards ({tool: calc_reward, ...}), so a
        # compute_score written for verl can use them.
        extra["rollout_reward_scores"] = dict(tool_scores or {})
        return Sample(
            index=i,
            data_source=str(non_tensor[self.reward_fn_key][i]),
            ground_truth=reward_model["ground_truth"],
            extra_info=extra,
            response_str=self.tokenizer.decode(response[valid].tolist(), skip_special_tokens=True),
            response_length=int(valid.numel()),
            last_position=int(valid[-1]) if valid.numel() else -1,
            tool_reward=self.tool_reward_weight * _tool_reward_sum(tool_scores),
        )

    def _split(self, sample: Sample, result: Any) -> tuple[float, dict[str, Any]]:
        """``(score, extra info)`` from a float or a dict result."""
        where = f"sample {sample.index} (data_source={sample.data_source!r})"
        if isinstance(result, Mapping):
            if "score" not in result:
                raise RewardScoreError(
                    f"compute_score returned a dict without 'score' for {where}: keys {list(result)}"
                )
            return float(result["score"]), dict(result)
        try:
            return float(result), {}
        except (TypeError, ValueError) as err:
            raise RewardScoreError(
                f"compute_score returned {result!r} for {where}; expected a number or a dict"
            ) from err

    def _log_examples(self, data: Any, samples: list[Sample], rewards: torch.Tensor) -> None:
        """Log the first ``num_examine`` samples of each data source at INFO."""
        if self.num_examine <= 0:
            return
        shown: dict[str, int] = {}
        prompts = data.batch.get("prompts", None)
        for sample in samples:
            if shown.get(sample.data_source, 0) >= self.num_examine:
                continue
            shown[sample.data_source] = shown.get(sample.data_source, 0) + 1
            prompt = ""
            if prompts is not None:
                ids = prompts[sample.index][
                    data.batch["attention_mask"][sample.index, : prompts.shape[-1]].bool()
                ]
                prompt = self.tokenizer.decode(ids.tolist(), skip_special_tokens=True)
            logger.info(
                "[%s] [prompt] %s\n[response] %s\n[ground_truth] %s\n[reward] %.4f",
                sample.data_source,
                prompt,
                sample.response_str,
                sample.ground_truth,
                float(rewards[sample.index].sum()),
            )


def _log_failures(failures: list[ScoreFailure], total: int) -> None:
    """One warning per batch for the samples whose score function raised."""
    if failures:
        infra = sum(f.infra for f in failures)
        logger.warning("compute_score raised on %d of %d samples (%d infrastructure failures, "
                       "%d scored 0 as the model's); first: %s", len(failures), total, infra,
                       len(failures) - infra, failures[0].error)


def _collate(infos: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Per-sample dicts -> one list per key, None where a sample lacks the key."""
    keys: dict[str, None] = {}
    for info in infos:
        keys.update(dict.fromkeys(info))
    return {key: [info.get(key) for info in infos] for key in keys}
