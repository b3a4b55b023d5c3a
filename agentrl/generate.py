"""`agentrl generate`: roll out a parquet dataset with tools and interactions, no training.

    agentrl generate --config recipe.yaml data.path=test.parquet data.output_path=out.jsonl \\
        actor_rollout_ref.model.path=MODEL actor_rollout_ref.rollout.n=4

The same pieces as training, like verl's generation entry point: RLHFDataset over
`data.path` (batches of `data.val_batch_size` prompts; null: all at once), the backend of
`actor_rollout_ref.rollout.name` (`hf` loads `actor_rollout_ref.model.path`; `sglang`
talks to `rollout.server_urls` or launches servers), the tools of
`multi_turn.tool_config_path` (recorded or replayed with `tool_record_mode`), the
interactions of `multi_turn.interaction_config_path`, and the reward manager when a score
function is known for the data (`custom_reward_function.path`, or a built-in scorer for
every `data_source`). Sampling follows `rollout.n`, `temperature`, `top_p`, `top_k` and
`do_sample` (set `do_sample=false` for greedy evaluation).

One jsonl row per trajectory, in dataset order (the n samples of a prompt together):

    index, sample, data_source, messages, input_ids, loss_mask, rollout_log_probs (the
    last two aligned with input_ids), prompt_length, finish_reason, truncation, state,
    num_turns, reward_scores, metrics (tool calls and errors, latencies), score (when scored)

A progress bar counts trajectories; a summary (mean score, turns, tool calls, errors) is
logged at the end and returned by `generate`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from agentrl.config import ConfigError, chat_template_kwargs
from agentrl.config.cli import add_config_arguments, config_from_args
from agentrl.protocol import DataProto
from agentrl.utils.jsonl import json_default
from agentrl.workers.rollout_assembly import build_rollout
from agentrl.workers.rollout_settings import RolloutSettings

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)  # --config FILE or --config-path/--config-name, overrides


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
        check_generate_config(cfg)
    except ConfigError as err:
        sys.stderr.write(f"{err}\n")
        return 2
    generate(cfg)
    return 0


def check_generate_config(cfg: DictConfig) -> None:
    """The keys `agentrl generate` needs beyond the defaults (ConfigError names them)."""
    problems = []
    if not cfg.data.path:
        problems.append("data.path must name the parquet file(s) to roll out")
    if not cfg.data.output_path:
        problems.append("data.output_path must name the jsonl file to write")
    rollout = cfg.actor_rollout_ref.rollout
    if not cfg.actor_rollout_ref.model.path and not rollout.server_urls:
        problems.append("actor_rollout_ref.model.path must name the model (or "
                        "actor_rollout_ref.rollout.server_urls the servers that serve it)")
    if problems:
        raise ConfigError(problems)


def generate(cfg: DictConfig, backend: Any = None) -> dict[str, float]:
    """Roll out `data.path` and write `data.output_path`; returns the summary.

    `backend` replaces the configured one (any `GenerationBackend`); it is not closed here.
    """
    check_generate_config(cfg)
    return asyncio.run(_generate(cfg, backend))


async def _generate(cfg: DictConfig, backend: Any) -> dict[str, float]:
    from agentrl.data import create_rl_dataset, create_val_dataloader
    from agentrl.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(
        cfg.data.tokenizer or cfg.actor_rollout_ref.model.path,
        trust_remote_code=bool(cfg.data.trust_remote_code),
        chat_template=cfg.actor_rollout_ref.model.custom_chat_template,
    )
    dataset = create_rl_dataset(_files(cfg.data.path), cfg.data, tokenizer)
    loader = create_val_dataloader(dataset, cfg.data)
    rollout = cfg.actor_rollout_ref.rollout
    # the engine kind the config asks for (the in-process engine or a user's engine_class,
    # engine_workers > 1, or agent mode), over the configured or the given backend
    engine = build_rollout(
        RolloutSettings.from_config(cfg.actor_rollout_ref), tokenizer, backend=backend, seed=int(cfg.trainer.seed),
        chat_template_kwargs=chat_template_kwargs(cfg),
    )  # fmt: skip
    reward_fn = _reward_manager(cfg, dataset, tokenizer)
    out_path = Path(cfg.data.output_path).expanduser()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    totals = _Totals()
    try:
        with (
            out_path.open("w") as sink,
            tqdm(total=len(dataset) * rollout.n, desc="generate", unit="traj") as progress,
        ):
            for batch in loader:
                data = DataProto.from_single_dict(batch)
                out = await engine.agenerate_sequences(
                    data, on_request_done=lambda _: progress.update()
                )
                scores = _scores(reward_fn, out)
                for row in trajectory_rows(out, rollout.n, scores):
                    sink.write(json.dumps(row, ensure_ascii=False, default=json_default) + "\n")
                totals.add(out, scores)
    finally:
        await engine.aclose()  # the engine workers, and the backend unless it was given
    summary = totals.summary()
    logger.info(
        "wrote %d trajectories to %s: %s",
        int(summary["trajectories"]),
        out_path,
        ", ".join(f"{k}={v:.4g}" for k, v in summary.items()),
    )
    return summary


def _files(path: Any) -> list[str]:
    return (
        [str(p) for p in path]
        if isinstance(path, (list, tuple)) or OmegaConf.is_list(path)
        else [str(path)]
    )


def _reward_manager(cfg: DictConfig, dataset: Any, tokenizer: Any) -> Any:
    """The configured reward manager, or None when no score function covers the data."""
    from agentrl.reward import has_scorer, load_reward_manager

    if not cfg.custom_reward_function.path:
        key, frame = cfg.data.reward_fn_key, getattr(dataset, "dataframe", None)
        has_key = frame is not None and key in frame.column_names
        sources = set(frame[key]) if has_key else set()
        unknown = sorted(str(s) for s in sources if not has_scorer(str(s)))
        if not sources or unknown:
            logger.info(
                "no score function for data sources %s: trajectories are not scored "
                "(set custom_reward_function.path)",
                unknown or "(none)",
            )
            return None
    return load_reward_manager(
        cfg.reward_model,
        cfg.custom_reward_function,
        tokenizer,
        reward_fn_key=cfg.data.reward_fn_key,
    )


def _scores(reward_fn: Any, out: DataProto) -> list[float] | None:
    if reward_fn is None:
        return None
    scored = reward_fn(out, return_dict=True)
    return scored["reward_tensor"].sum(-1).tolist()


def trajectory_rows(out: DataProto, n: int, scores: list[float] | None) -> list[dict[str, Any]]:
    """One JSON-ready dict per trajectory of a rollout output (see the module docstring)."""
    prompt_len = out.batch["prompts"].shape[1]
    rows = []
    for i in range(len(out)):
        mask = out.batch["attention_mask"][i].bool()  # (P + R,)
        prompt_length = int(mask[:prompt_len].sum())
        log_probs = None
        if "rollout_log_probs" in out.batch.keys():
            response = out.batch["rollout_log_probs"][i][: int(mask[prompt_len:].sum())]
            log_probs = torch.cat([torch.zeros(prompt_length), response])  # like input_ids
        non_tensor = {k: v[i] for k, v in out.non_tensor_batch.items()}
        row = {
            "index": non_tensor.get("index", i // n),
            "sample": i % n,
            "data_source": non_tensor.get("data_source"),
            "messages": non_tensor["messages"],
            "input_ids": out.batch["input_ids"][i][mask].tolist(),
            "loss_mask": out.batch["loss_mask"][i][mask].tolist(),
            "rollout_log_probs": None if log_probs is None else log_probs.tolist(),
            "prompt_length": prompt_length,
            "finish_reason": non_tensor["finish_reason"],
            "truncation": non_tensor["truncation"],
            "state": non_tensor["request_state"],
            "num_turns": non_tensor["num_turns"],
            "reward_scores": non_tensor["reward_scores"],
            "metrics": non_tensor["rollout_metrics"],
        }
        if scores is not None:
            row["score"] = scores[i]
        rows.append(row)
    return rows


class _Totals:
    """Running sums for the end-of-run summary."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        self.score_sum = 0.0
        self.scored = 0

    def add(self, out: DataProto, scores: list[float] | None) -> None:
        metrics = out.meta_info["metrics"]
        for key in (
            "requests",
            "failed",
            "truncated",
            "tool_calls",
            "tool_errors",
            "parse_errors",
            "backend_errors",
        ):
            self.counts[key] = self.counts.get(key, 0.0) + metrics[f"rollout/{key}"]
        turns = float(np.sum(out.non_tensor_batch["num_turns"].astype(float)))
        self.counts["turns"] = self.counts.get("turns", 0.0) + turns
        if scores is not None:
            self.score_sum += sum(scores)
            self.scored += len(scores)

    def summary(self) -> dict[str, float]:
        n = max(self.counts.get("requests", 0.0), 1.0)
        out = {
            "trajectories": self.counts.get("requests", 0.0),
            "num_turns/mean": self.counts.get("turns", 0.0) / n,
            "tool_calls/mean": self.counts.get("tool_calls", 0.0) / n,
            "tool_errors": self.counts.get("tool_errors", 0.0),
            "parse_errors": self.counts.get("parse_errors", 0.0),
            "failed": self.counts.get("failed", 0.0),
            "truncated": self.counts.get("truncated", 0.0),
        }
        if self.scored:
            out["score/mean"] = self.score_sum / self.scored
        return out


if __name__ == "__main__":
    import sys

    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "generate"))
