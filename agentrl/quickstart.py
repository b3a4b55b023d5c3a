"""`agentrl quickstart`: teach a tiny model to use a calculator, on CPU, in minutes.

    agentrl quickstart --out-dir outputs/quickstart [--steps 20] [--size tiny]

Stages (each timed; see docs/quickstart.md for the numbers measured on a 2-core CPU):

1. model: a tiny Qwen2 model with random weights (`agentrl.models.tiny`);
2. data: arithmetic word problems (`agentrl.data.arithmetic`, train/test parquet; by
   default the `basic` level, a two-digit and a one-digit number, and the short system
   prompt, so that a model trained from scratch learns to copy the numbers in minutes) and
   correct calculator trajectories for SFT (`agentrl.data.arithmetic_sft`);
3. sft: a warm-up on those trajectories (`agentrl.trainer.sft.run_sft`), so the model
   emits well-formed calculator calls and `<answer>` tags;
4. eval_sft: greedy rollouts of the test split with the rollout engine and the real
   calculator (`agentrl.generate`): accuracy, tool-call rates;
5. rl: GRPO with multi-turn calculator rollouts (`agentrl.trainer.run_train`) with the
   recipe recipes/quickstart/config.yaml;
6. eval_rl: the same evaluation of the RL model (the last checkpoint's HF export).

Writes `OUT_DIR/report.json` (stage timings, SFT losses, both evaluations, the RL reward
curve) and `OUT_DIR/quickstart.log`. The report says what happened: if RL does not raise
the accuracy in the budget, the numbers show it.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agentrl.config import load_config

logger = logging.getLogger(__name__)

RECIPE_DIR = Path(__file__).resolve().parents[1] / "recipes" / "quickstart"
RECIPE_CONFIG = RECIPE_DIR / "config.yaml"
RECIPE_TOOLS = RECIPE_DIR / "calculator_tool.yaml"
# RL step metrics kept in the report's reward curve (when the trainer reports them).
CURVE_KEYS = (
    "critic/score/mean",
    "critic/rewards/mean",
    "actor/pg_loss",
    "actor/entropy",
    "response_length/mean",
    "timing_s/step",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", default="outputs/quickstart", help="where everything goes")
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps (0: SFT only)")
    parser.add_argument("--size", default="tiny", help="tiny model size (see make-tiny-model)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and data")
    parser.add_argument("--sft-examples", type=int, default=2048, help="SFT trajectories")
    parser.add_argument("--sft-epochs", type=int, default=3, help="SFT passes over them")
    parser.add_argument("--sft-lr", type=float, default=3e-3, help="SFT learning rate")
    parser.add_argument("--n-train", type=int, default=512, help="RL training problems")
    parser.add_argument("--n-test", type=int, default=64, help="held-out test problems")
    parser.add_argument(
        "--difficulty",
        default="basic",
        help="arithmetic level: basic (two-digit + - *), easy, medium, hard",
    )
    parser.add_argument("--batch-size", type=int, default=8, help="SFT batch size")
    parser.add_argument("overrides", nargs="*", help="RL config overrides key.sub=value")


def run(args: argparse.Namespace) -> int:
    report = run_quickstart(
        Path(args.out_dir),
        steps=args.steps,
        size=args.size,
        seed=args.seed,
        sft_examples=args.sft_examples,
        sft_epochs=args.sft_epochs,
        sft_lr=args.sft_lr,
        n_train=args.n_train,
        n_test=args.n_test,
        difficulty=args.difficulty,
        sft_batch_size=args.batch_size,
        overrides=args.overrides,
    )
    sft, final = report["eval_sft"], report.get("eval_rl", report["eval_sft"])
    logger.info(
        "quickstart done in %.0fs: accuracy %.3f after SFT -> %.3f after RL; well-formed "
        "calculator calls %.3f -> %.3f; report: %s",
        report["timing_s"]["total"],
        sft["accuracy"],
        final["accuracy"],
        sft["well_formed_call_rate"],
        final["well_formed_call_rate"],
        Path(args.out_dir) / "report.json",
    )
    return 0


# ---------------------------------------------------------------------- stages


def prepare_data(
    out_dir: Path,
    n_train: int,
    n_test: int,
    sft_examples: int,
    seed: int,
    tool_config: Path,
    difficulty: str = "basic",
) -> dict[str, Path]:
    """Write train/test parquet and the SFT jsonl (with the tool schemas the rollout shows).

    Every prompt has the short system prompt (`SHORT_SYSTEM_PROMPT`): a long one would
    make most of each SFT and RL sequence constant text.
    """
    from agentrl.data.arithmetic import SHORT_SYSTEM_PROMPT, write_arithmetic_dataset
    from agentrl.data.arithmetic_sft import write_arithmetic_sft_dataset
    from agentrl.tools import load_tool_schemas

    (schema,) = load_tool_schemas(tool_config)
    train, test = write_arithmetic_dataset(
        out_dir,
        n_train,
        n_test,
        seed=seed,
        difficulty=difficulty,
        system_prompt=SHORT_SYSTEM_PROMPT,
    )
    # SFT uses other problems than RL (another seed), from the train side of the split.
    sft = write_arithmetic_sft_dataset(
        out_dir / "sft_train.jsonl",
        sft_examples,
        seed=seed + 1000,
        difficulty=difficulty,
        tool_schema=schema,
        system_prompt=SHORT_SYSTEM_PROMPT,
    )
    return {"train": train, "test": test, "sft": sft}


def evaluate(
    model_dir: Path, test_path: Path, out_path: Path, overrides: Sequence[str] = ()
) -> dict[str, float]:
    """Greedy rollouts of `test_path` with the calculator; returns the evaluation metrics.

    `accuracy`: share of answers scoring 1; `tool_call_rate`: share of trajectories with at
    least one executed calculator call; `well_formed_call_rate`: the same with no parse or
    tool error in the trajectory; `answer_rate`: share with an `<answer>` tag; `turns/mean`.
    """
    from agentrl.generate import generate

    started = time.perf_counter()
    cfg = load_config(
        RECIPE_CONFIG,
        [
            f"actor_rollout_ref.model.path={model_dir}",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={RECIPE_TOOLS}",
            f"data.path={test_path}",
            f"data.output_path={out_path}",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.rollout.do_sample=false",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",  # no training here
            *overrides,
        ],
    )
    generate(cfg)
    rows = [json.loads(line) for line in out_path.read_text().splitlines()]
    metrics = trajectory_metrics(rows)
    metrics["time_s"] = time.perf_counter() - started
    return metrics


def trajectory_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Evaluation metrics of `agentrl generate` rows (see `evaluate`)."""
    if not rows:
        raise ValueError("no trajectories to evaluate")
    n = len(rows)
    called = [r["metrics"]["tool_calls"].get("calculator", 0) > 0 for r in rows]
    clean = [
        c and not r["metrics"]["tool_errors"] and r["metrics"]["parse_errors"] == 0
        for c, r in zip(called, rows, strict=True)
    ]
    answered = ["<answer>" in _final_text(r) for r in rows]
    return {
        "trajectories": float(n),
        "accuracy": sum(float(r.get("score") or 0.0) for r in rows) / n,
        "tool_call_rate": sum(called) / n,
        "well_formed_call_rate": sum(clean) / n,
        "answer_rate": sum(answered) / n,
        "turns/mean": sum(float(r["num_turns"]) for r in rows) / n,
    }


def _final_text(row: dict[str, Any]) -> str:
    assistant = [m for m in row["messages"] if m.get("role") == "assistant"]
    return str(assistant[-1].get("content") or "") if assistant else ""


def rl_config(
    model_dir: Path,
    data: dict[str, Path],
    out_dir: Path,
    steps: int,
    seed: int,
    overrides: Sequence[str] = (),
) -> DictConfig:
    """The recipe config with the quickstart's paths and step count."""
    return load_config(
        RECIPE_CONFIG,
        [
            f"actor_rollout_ref.model.path={model_dir}",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={RECIPE_TOOLS}",
            f"data.train_files={data['train']}",
            f"data.seed={seed}",
            f"trainer.seed={seed}",
            f"trainer.total_training_steps={steps}",
            f"trainer.default_local_dir={out_dir / 'checkpoints'}",
            *overrides,
        ],
    )


def rl_model_dir(cfg: DictConfig) -> Path:
    """The HF export of the last checkpoint (`global_step_N/actor/huggingface`)."""
    root = Path(str(cfg.trainer.default_local_dir))
    step = int((root / "latest_checkpointed_iteration.txt").read_text().strip())
    path = root / f"global_step_{step}" / "actor" / "huggingface"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no HF export in {path}: the recipe's actor.checkpoint.save_contents needs hf_model"
        )
    return path


def reward_curve(history: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """Per-step RL metrics for the report (the keys of CURVE_KEYS the trainer logged)."""
    return [
        {"step": i + 1, **{k: float(m[k]) for k in CURVE_KEYS if k in m}}
        for i, m in enumerate(history)
    ]


# ---------------------------------------------------------------------- the pipeline


def run_quickstart(
    out_dir: Path,
    steps: int = 20,
    size: str = "tiny",
    seed: int = 0,
    sft_examples: int = 2048,
    sft_epochs: int = 3,
    sft_lr: float = 3e-3,
    n_train: int = 512,
    n_test: int = 64,
    difficulty: str = "basic",
    sft_batch_size: int = 8,
    overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """Run every stage (see the module docstring); write and return the report."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    log_handler = _file_log(out_dir / "quickstart.log")
    timing: dict[str, float] = {}
    report: dict[str, Any] = {
        "settings": {
            "size": size,
            "seed": seed,
            "steps": steps,
            "sft_examples": sft_examples,
            "sft_epochs": sft_epochs,
            "sft_lr": sft_lr,
            "n_train": n_train,
            "n_test": n_test,
            "difficulty": difficulty,
            "sft_batch_size": sft_batch_size,
            "overrides": list(overrides),
        },
        "timing_s": timing,
    }
    started = time.perf_counter()
    try:
        with _stage("model", timing):
            from agentrl.models.tiny import make_tiny_model

            init_dir = make_tiny_model(out_dir / "model_init", size=size, seed=seed)
        with _stage("data", timing):
            data = prepare_data(
                out_dir / "data", n_train, n_test, sft_examples, seed, RECIPE_TOOLS, difficulty
            )
        with _stage("sft", timing):
            from agentrl.trainer.sft import run_sft

            report["sft"] = run_sft(
                init_dir,
                data["sft"],
                out_dir / "model_sft",
                epochs=sft_epochs,
                lr=sft_lr,
                batch_size=sft_batch_size,
                max_length=1024,
                seed=seed,
            )
        with _stage("eval_sft", timing):
            report["eval_sft"] = evaluate(
                out_dir / "model_sft", data["test"], out_dir / "eval_sft.jsonl"
            )
        logger.info("after SFT: %s", _summary(report["eval_sft"]))
        if steps > 0:
            cfg = rl_config(out_dir / "model_sft", data, out_dir, steps, seed, overrides)
            with _stage("rl", timing):
                from agentrl.trainer import run_train

                report["rl"] = reward_curve(run_train(cfg))
            with _stage("eval_rl", timing):
                report["eval_rl"] = evaluate(
                    rl_model_dir(cfg), data["test"], out_dir / "eval_rl.jsonl"
                )
            logger.info("after RL: %s", _summary(report["eval_rl"]))
        timing["total"] = time.perf_counter() - started
        (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    finally:
        logging.getLogger().removeHandler(log_handler)
        log_handler.close()
    return report


class _stage:
    """Times a stage into `timing[name]` and logs its start and end."""

    def __init__(self, name: str, timing: dict[str, float]):
        self.name, self.timing = name, timing

    def __enter__(self) -> None:
        logger.info("quickstart stage %s ...", self.name)
        self.started = time.perf_counter()

    def __exit__(self, *exc_info: object) -> None:
        self.timing[self.name] = time.perf_counter() - self.started
        logger.info("quickstart stage %s: %.1fs", self.name, self.timing[self.name])


def _summary(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.3g}" for k, v in metrics.items())


def _file_log(path: Path) -> logging.Handler:
    """Copy every log record of the run to `path` (the root logger's level applies)."""
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    return handler
