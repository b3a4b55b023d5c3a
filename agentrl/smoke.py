"""`agentrl smoke`: one training step after another on CPU, offline, through the real stack.

    agentrl smoke --out-dir outputs/smoke --steps 3

It builds a tiny Qwen2 model, an arithmetic dataset and a calculator tool config, starts
an `ActorRolloutRefWorker` in an in-process worker group (FSDP2 over one rank, the
embedded `hf` backend and the multi-turn `AsyncRolloutEngine` with the calculator), and
for each step:

    rollout (tools) -> reward -> old/ref log-probs -> GRPO advantage -> update_actor
    (which syncs the new weights into the rollout backend) -> log

It also measures what the update did: the surrogate gain `mean(A * (log p_new - log p_old))`
over the model's tokens of the same batch, which one gradient step makes positive.
Metrics go to `OUT_DIR/metrics.jsonl`. The trainer's loop (validation, checkpoints,
tracking, Ray placement) is not here; this is the pipeline's smoke test and the
README's main job until the quickstart lands.

The reward is the arithmetic scorer plus a small shaping term for plain-text output
(`smoke_compute_score`, loaded as a custom reward function from this file), so a random
tiny model's samples differ in reward within a group and the update has a gradient.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from agentrl.algos import agg_loss, compute_advantage
from agentrl.config import load_config
from agentrl.data import create_rl_dataset, create_train_dataloader
from agentrl.data.arithmetic import write_arithmetic_dataset
from agentrl.distributed import InProcessWorkerGroup, WorkerSpec
from agentrl.models.tiny import make_tiny_model
from agentrl.protocol import DataProto
from agentrl.reward import default_compute_score, load_reward_manager
from agentrl.workers import ActorRolloutRefWorker
from tools.calculator import DEFAULT_SCHEMA as CALCULATOR_SCHEMA

logger = logging.getLogger(__name__)


def smoke_compute_score(data_source: str, solution_str: str, ground_truth: Any,
                        extra_info: dict | None = None) -> dict:
    """The task score plus 0.1 x the share of plain-text characters (letters, digits,
    spaces) in the response: a dense shaping term, so that even a random model's samples
    differ in reward within a group."""
    score = float(default_compute_score(data_source, solution_str, ground_truth, extra_info))
    plain = sum(c.isalnum() or c == " " for c in solution_str) / max(len(solution_str), 1)
    return {"score": score + 0.1 * plain, "acc": score}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", default="outputs/smoke", help="where model, data and metrics go")
    parser.add_argument("--steps", type=int, default=3, help="training steps")
    parser.add_argument("--size", default="tiny", help="tiny model size (see make-tiny-model)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights, data and sampling")
    parser.add_argument("overrides", nargs="*", help="config overrides key.sub=value")


def run(args: argparse.Namespace) -> int:
    metrics = run_smoke(Path(args.out_dir), steps=args.steps, size=args.size, seed=args.seed,
                        overrides=args.overrides)
    last = metrics[-1]
    logger.info("smoke run done: %d steps, last reward %.3f, surrogate gain %.2e, "
                "tool calls %d", len(metrics), last["reward/mean"],
                last["actor/surrogate_gain"], int(last["rollout/tool_calls"]))
    return 0


def prepare(out_dir: Path, size: str, seed: int,
            overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """Write the model, the data and the tool config; return the smoke run's config."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model_dir = out_dir / "model"
    if not (model_dir / "config.json").is_file():
        make_tiny_model(model_dir, size=size, seed=seed)
    train_path, _ = write_arithmetic_dataset(out_dir / "data", n_train=64, n_test=8, seed=seed)
    tool_config = out_dir / "calculator_tool.yaml"
    tool_config.write_text(yaml.safe_dump({"tools": [{
        "class_name": "tools.calculator.CalculatorTool",
        "config": {"type": "native"},
        "tool_schema": CALCULATOR_SCHEMA,
    }]}))
    return load_config(overrides=[
        f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={train_path}",
        "data.train_batch_size=4", "data.max_prompt_length=768", "data.max_response_length=48",
        f"data.seed={seed}", f"trainer.seed={seed}", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.optim.lr=1e-4",
        "algorithm.adv_estimator=grpo", f"custom_reward_function.path={Path(__file__)}",
        "custom_reward_function.name=smoke_compute_score", *overrides])


def run_smoke(out_dir: Path, steps: int = 3, size: str = "tiny", seed: int = 0,
              overrides: list[str] | tuple[str, ...] = ()) -> list[dict[str, float]]:
    """Run the smoke pipeline; return (and write) one metrics dict per step."""
    cfg = prepare(out_dir, size, seed, overrides)
    tokenizer = AutoTokenizer.from_pretrained(cfg.actor_rollout_ref.model.path)
    reward_fn = load_reward_manager(cfg.reward_model, cfg.custom_reward_function, tokenizer,
                                    reward_fn_key=cfg.data.reward_fn_key)
    loader = create_train_dataloader(create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer),
                                     cfg.data)
    group = InProcessWorkerGroup(WorkerSpec(
        ActorRolloutRefWorker, cfg.actor_rollout_ref, role="actor_rollout_ref", seed=seed,
        chat_template_kwargs=OmegaConf.to_container(cfg.data.apply_chat_template_kwargs)))
    group.init_model()
    history: list[dict[str, float]] = []
    try:
        with (out_dir / "metrics.jsonl").open("w") as sink:
            for step, batch in enumerate(_batches(loader, steps), 1):
                step_metrics = train_step(group, reward_fn, batch, cfg)
                step_metrics["step"] = step
                sink.write(json.dumps(step_metrics) + "\n")
                logger.info("step %d: %s", step, ", ".join(
                    f"{k}={v:.4g}" for k, v in step_metrics.items() if k != "step"))
                history.append(step_metrics)
    finally:
        group.close()
    return history


def train_step(group, reward_fn, batch: dict[str, Any], cfg) -> dict[str, float]:
    """rollout -> reward -> log-probs -> advantage -> update, and what the update did."""
    started = time.perf_counter()
    prompts = DataProto.from_single_dict(batch)
    prompts.non_tensor_batch["uid"] = np.array([str(i) for i in range(len(prompts))],
                                               dtype=object)
    data = group.generate_sequences(prompts)  # (B x n) trajectories, interleaved
    scored = reward_fn(data, return_dict=True)
    data.batch["token_level_scores"] = scored["reward_tensor"]
    data.batch["token_level_rewards"] = scored["reward_tensor"]
    data = data.union(group.compute_log_prob(data))
    data = compute_advantage(data, cfg.algorithm.adv_estimator,
                             norm_adv_by_std_in_grpo=cfg.algorithm.norm_adv_by_std_in_grpo)
    update = group.update_actor(data).meta_info["metrics"]
    after = group.compute_log_prob(data).batch["old_log_probs"]  # same tokens, new weights
    mask = data.batch["response_mask"]
    gain = agg_loss(data.batch["advantages"] * (after - data.batch["old_log_probs"]), mask,
                    "token-mean")
    rollout = data.meta_info.get("metrics", {})
    metrics = {k: float(v) for k, v in update.items()}
    metrics.update({
        "actor/surrogate_gain": gain.item(),
        "reward/mean": data.batch["token_level_scores"].sum(-1).mean().item(),
        "reward/acc": float(np.mean(scored["reward_extra_info"]["acc"])),
        "response_length/mean": data.batch["attention_mask"][:, -mask.shape[1]:].sum(-1)
        .float().mean().item(),
        "response_length/model_tokens": mask.sum(-1).float().mean().item(),
        "rollout/tool_calls": float(rollout.get("tool_calls", 0)),
        "time/step_s": time.perf_counter() - started,
    })
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    if bad:
        raise FloatingPointError(f"non-finite metrics in the smoke step: {bad}")
    return metrics


def _batches(loader, steps: int):
    produced = 0
    while produced < steps:
        for batch in loader:
            yield batch
            produced += 1
            if produced == steps:
                return
