"""`agentrl smoke`: a few training steps on CPU, offline, through the whole stack.

    agentrl smoke --out-dir outputs/smoke --steps 3

It builds a tiny Qwen2 model, an arithmetic dataset and a calculator tool config, then
runs the trainer (`agentrl.trainer.run_train`, the same loop as `agentrl train`) for
`--steps` GRPO steps: an in-process FSDP2 `ActorRolloutRefWorker`, the multi-turn
`AsyncRolloutEngine` with the calculator on the embedded `hf` backend, the reward
manager, advantages, the PPO update and the weight sync into the rollout backend, then a
checkpoint. Metrics go to `OUT_DIR/metrics.jsonl`, the checkpoint to
`OUT_DIR/global_step_N/`. Every run starts fresh (`trainer.resume_mode=disable`).

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

from agentrl.config import load_config
from agentrl.models.tiny import make_tiny_model
from agentrl.plugins import load_object
from agentrl.reward import default_compute_score
from agentrl.tasks.arithmetic import write_arithmetic_dataset
from agentrl.trainer import run_train

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
    history = run_smoke(Path(args.out_dir), steps=args.steps, size=args.size, seed=args.seed,
                        overrides=args.overrides)
    last = history[-1]
    logger.info("smoke run done: %d steps, last mean score %.3f, tool calls %d",
                len(history), last["critic/score/mean"], int(last["rollout/tool_calls"]))
    return 0


def smoke_config(out_dir: Path, size: str, seed: int,
                 overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """Write the model, the data and the tool config; return the smoke run's config."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model_dir = out_dir / "model"
    if not (model_dir / "config.json").is_file():
        make_tiny_model(model_dir, size=size, seed=seed)
    train_path, _ = write_arithmetic_dataset(out_dir / "data", n_train=64, n_test=8, seed=seed)
    tool_config = out_dir / "calculator_tool.yaml"
    tool_config.write_text(yaml.safe_dump({"tools": [{
        "class_name": CALCULATOR_TOOL,
        "config": {"type": "native"},
        "tool_schema": load_object("tools.calculator.DEFAULT_SCHEMA"),
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
    """Prepare the inputs and train `steps` steps; returns one metrics dict per step."""
    cfg = smoke_config(out_dir, size, seed, [
        f"trainer.total_training_steps={steps}", f"trainer.default_local_dir={out_dir}",
        "trainer.resume_mode=disable", "trainer.logger=[console,file]",
        "trainer.val_before_train=false", *overrides])
    return run_train(cfg)


if __name__ == "__main__":
    import sys

    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "smoke"))
