"""`agentrl smoke`: a few training steps on CPU, offline, through the whole stack.

    agentrl smoke --out-dir outputs/smoke --steps 3

It builds a tiny Qwen2 model, an arithmetic dataset and a calculator tool config, then
runs the trainer (`agentrl.trainer.run_train`, the same loop as `agentrl train`) for
`--steps` GRPO steps: an in-process FSDP2 `ActorRolloutRefWorker`, the multi-turn
`AsyncRolloutEngine` with the calculator on the embedded `hf` backend, the reward
manager, advantages, the PPO update and the weight sync into the rollout backend, then a
checkpoint. Metrics go to `OUT_DIR/metrics.jsonl`, the checkpoint to
`OUT_DIR/global_step_N/`. Every run starts fresh (`trainer.resume_mode=disable`). The
config (the overrides given included) is validated before anything is written: a bad
one is one message on stderr and exit status 2.

The reward is the arithmetic scorer plus a small shaping term for plain-text output
(`smoke_compute_score`, loaded as a custom reward function from this file), so a random
tiny model's samples differ in reward within a group and the update has a gradient.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import yaml

from agentrl.config import ConfigError, load_config
from agentrl.models.tiny import TINY_SIZES, make_tiny_model
from agentrl.plugins import load_object
from agentrl.reward import default_compute_score
from agentrl.tasks.arithmetic import write_arithmetic_dataset
from agentrl.trainer import run_train
from agentrl.trainer.preflight import device_problems, function_problems
from agentrl.utils.command import report_error
from agentrl.utils.out_dir import check_writable_dir

logger = logging.getLogger(__name__)

# the tool plugin, named by path as a user's tool config names it
CALCULATOR_TOOL = "tools.calculator.CalculatorTool"


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
    try:  # before anything is written: one message, exit 2
        cfg = smoke_run_config(Path(args.out_dir), steps=args.steps, size=args.size,
                               seed=args.seed, overrides=args.overrides)
    except ValueError as err:  # a ConfigError among them
        return report_error(err)
    try:
        history = run_train(cfg)
    except ConfigError as err:  # the trainer's preflight: before any model loads
        return report_error(err)
    last = history[-1]
    logger.info("smoke run done: %d steps, last mean score %.3f, tool calls %d",
                len(history), last["critic/score/mean"], int(last["rollout/tool_calls"]))
    return 0


def smoke_config(out_dir: Path, size: str, seed: int,
                 overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """The smoke run's config, validated first (a ValueError, nothing written, when it is
    refused); then the model, the data and the tool config it names are written."""
    if size not in TINY_SIZES:
        raise ValueError(f"--size is {size!r}; choose one of {', '.join(TINY_SIZES)}")
    check_writable_dir(out_dir, "--out-dir")
    model_dir, data_dir = out_dir / "model", out_dir / "data"
    tool_config = out_dir / "calculator_tool.yaml"
    cfg = load_config(overrides=[
        f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={data_dir / 'train.parquet'}",
        "data.train_batch_size=4", "data.max_prompt_length=768", "data.max_response_length=48",
        f"data.seed={seed}", f"trainer.seed={seed}", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.optim.lr=1e-4",
        "algorithm.adv_estimator=grpo", f"custom_reward_function.path={Path(__file__)}",
        "custom_reward_function.name=smoke_compute_score", *overrides])
    if problems := device_problems(cfg) + function_problems(cfg):  # the rest needs the files
        raise ConfigError(problems)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not (model_dir / "config.json").is_file():
        make_tiny_model(model_dir, size=size, seed=seed)
    write_arithmetic_dataset(data_dir, n_train=64, n_test=8, seed=seed)  # train.parquet, ...
    tool_config.write_text(yaml.safe_dump({"tools": [{
        "class_name": CALCULATOR_TOOL,
        "config": {"type": "native"},
        "tool_schema": load_object("tools.calculator.DEFAULT_SCHEMA"),
    }]}))
    return cfg


def smoke_run_config(out_dir: Path, steps: int = 3, size: str = "tiny", seed: int = 0,
                     overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """`smoke_config` with the run's step count, checkpoint place and logging."""
    if steps < 1:
        raise ValueError(f"--steps must be >= 1, got {steps}")
    return smoke_config(out_dir, size, seed, [
        f"trainer.total_training_steps={steps}", f"trainer.default_local_dir={out_dir}",
        "trainer.resume_mode=disable", "trainer.logger=[console,file]",
        "trainer.val_before_train=false", *overrides])


def run_smoke(out_dir: Path, steps: int = 3, size: str = "tiny", seed: int = 0,
              overrides: list[str] | tuple[str, ...] = ()) -> list[dict[str, float]]:
    """Prepare the inputs and train `steps` steps; returns one metrics dict per step."""
    return run_train(smoke_run_config(out_dir, steps, size, seed, overrides))


if __name__ == "__main__":
    import sys

    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "smoke"))
