"""Validation: roll out the validation set with `rollout.val_kwargs`, score it, and reduce
the scores to `val-core/...` and `val-aux/...` metrics (verl's names; metrics.py).

Every `trainer.test_freq` steps and after the last (and before the first with
`trainer.val_before_train`); the first `trainer.log_val_generations` samples of each batch
go to the log, and with `trainer.validation_data_dir` every trajectory to a jsonl file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agentrl.protocol import DataProto, to_object_array
from agentrl.trainer.dump import dump_trajectories, trajectory_ids
from agentrl.trainer.metrics import merge_batch_metrics, process_validation_metrics
from agentrl.trainer.trainer_settings import ValidationSettings, refuse_raw

logger = logging.getLogger(__name__)


def validate(
    actor_rollout: Any,
    batches: Iterable[dict[str, Any]],
    score_fn: Callable[[DataProto], DataProto],
    tokenizer: Any,
    settings: ValidationSettings,
    reward_fn_key: str,
    step: int,
) -> dict[str, float]:
    """The validation metrics at `step`: each loader batch rolled out (`validate=True`, so
    the rollout uses `val_kwargs`) and scored with `score_fn`."""
    refuse_raw(settings, ValidationSettings, "validate")
    sources: list[str] = []
    uids: list[str] = []
    rows: list[dict[str, Any]] = []
    rollout: list[dict[str, float]] = []  # each batch's rollout metrics
    for i, batch_dict in enumerate(batches):
        batch = DataProto.from_single_dict(batch_dict)
        batch.non_tensor_batch["uid"] = to_object_array(
            [f"val-{i}-{j}" for j in range(len(batch))], "uid"
        )
        batch.meta_info.update(validate=True, global_steps=step)
        out = actor_rollout.generate_sequences(batch)
        rollout.append(dict(out.meta_info.get("metrics", {})))
        out = score_fn(out)
        scores = out.batch["token_level_scores"].sum(-1).tolist()
        per_row = list(out.non_tensor_batch["reward_extra_info"])
        sources += [str(s) for s in out.non_tensor_batch.get(reward_fn_key, ["unknown"] * len(out))]
        uids += list(out.non_tensor_batch["uid"])
        rows += [{"reward": s, **row} for s, row in zip(scores, per_row, strict=True)]
        log_generations(out, scores, tokenizer, settings.log_val_generations, step)
        if settings.validation_data_dir:
            dump_trajectories(Path(settings.validation_data_dir), out, step, tokenizer)
    names = list(dict.fromkeys(name for row in rows for name in row))
    variables = {name: [row.get(name) for row in rows] for name in names}
    metrics = process_validation_metrics(sources, uids, variables)
    return metrics | {f"val-aux/{k}": v for k, v in merge_batch_metrics(rollout).items()}


def log_generations(data: DataProto, scores: list[float], tokenizer: Any, count: int,
                    step: int) -> None:  # fmt: skip
    """The first `count` samples of `data`, prompt and response as text, to the log."""
    for i in range(min(count, len(data))):
        prompt, response, _ = trajectory_ids(data, i)
        logger.info(
            "val sample %d (step %d, score %.3f)\n[prompt] %s\n[response] %s",
            i, step, scores[i], tokenizer.decode(prompt, skip_special_tokens=True),
            tokenizer.decode(response, skip_special_tokens=True),
        )  # fmt: skip
