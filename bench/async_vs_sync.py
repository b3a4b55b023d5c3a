"""Training steps per minute of sync, one_step_off and async training, and held-out accuracy
after the same number of steps, on the quickstart's calculator task with heavy-tailed tool
latency, measured in one run.

    python bench/async_vs_sync.py                    # seed 0, 25 steps per mode
    python bench/async_vs_sync.py --seeds 0 1 --steps 25 --out-dir outputs/async_vs_sync
    python bench/async_vs_sync.py --modes async --max-staleness 1   # one mode, another bound
    python bench/async_vs_sync.py --override trainer.trace=false     # any config key, every mode

The quickstart's model is SFT-warm-started once per seed (its SFT stage and defaults: nano
model, the imperfect teacher, until the held-out skill check passes); then each mode runs
GRPO from that model with the quickstart's recipe, its calculator answering after a
lognormal delay (median 200 ms, capped at 3 s: bench/latency_calculator.py); async runs with ``off_policy.max_staleness`` 2 unless
``--max-staleness`` says otherwise (one_step_off is 1 by definition). Steps per minute count
the training loop's steps over the sum of their wall times (server start-up, validation and
the final checkpoint excluded);
accuracy is greedy on the quickstart's 256 held-out problems (± standard error), evaluated
with the plain calculator. Prints a markdown table per seed and, last, one JSON line with
``sync_steps_per_min``, ``one_step_off_steps_per_min``, ``async_steps_per_min`` and
``async_over_sync`` (means over the seeds) and each seed's numbers.

A slower machine on purpose (bench/slowed.py), around the training runs and their
evaluations (the SFT warm start included, the data preparation too): `--busy-share 0.3` (a
competing process pinned to each core, busy 30% of every 10 ms at nice -20: every core
~1.43x slower) or `--cpu-quota 0.7` (a cgroup allowed 70% of the machine's CPU time, the
trainer, its Ray workers and servers inside; root). The JSON line records it as ``slowed``
(null when idle):

    python bench/async_vs_sync.py --seeds 0 --steps 25 --busy-share 0.3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

import slowed
import yaml

ROOT = Path(__file__).resolve().parent.parent
MODES = ("sync", "one_step_off", "async")


def latency_tools(path: Path, seed: int) -> Path:
    """The quickstart's tool config with the latency calculator in its place."""
    from agentrl.tasks.quickstart import recipe_file

    tools = yaml.safe_load(recipe_file("quickstart", "calculator_tool.yaml").read_text())
    entry = tools["tools"][0]
    entry["class_name"] = f"{ROOT / 'bench' / 'latency_calculator.py'}:LatencyCalculatorTool"
    entry["config"] = {**entry.get("config", {}), "latency_seed": seed}
    path.write_text(yaml.safe_dump(tools))
    return path


def run_seed(
    out: Path, seed: int, steps: int, modes: tuple[str, ...], max_staleness: int = 2,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    from agentrl.models.tiny import make_tiny_model
    from agentrl.quickstart.evaluation import evaluate_model
    from agentrl.quickstart.pipeline import (
        QuickstartSettings,
        rl_config,
        rl_model_dir,
        sft_stage,
    )
    from agentrl.tasks.quickstart import CALCULATOR, recipe_file
    from agentrl.trainer import run_train

    s = QuickstartSettings(seed=seed, steps=steps)
    data = CALCULATOR.prepare(out / "data", s)
    sft_dir = out / "model_sft"
    if not (sft_dir / "config.json").is_file():
        init = make_tiny_model(out / "model_init", size=s.size, seed=seed,
                               chat_template="compact_tools")
        sft_stage(init, data.sft, sft_dir, s)  # the quickstart's SFT, its check included
    plain_tools = recipe_file("quickstart", "calculator_tool.yaml")
    slow_tools = latency_tools(out / "latency_tool.yaml", seed)

    def evaluate(model_dir: Path, name: str) -> dict[str, Any]:
        return evaluate_model(
            CALCULATOR.recipe_config, model_dir, data.test, out / name, seed, "calculator",
            data.groups, CALCULATOR.aliases,
            [f"actor_rollout_ref.rollout.multi_turn.tool_config_path={plain_tools}"],
        )  # fmt: skip

    result: dict[str, Any] = {"seed": seed, "steps": steps, "eval_sft": evaluate(sft_dir, "eval_sft")}
    for mode in modes:
        overrides = [f"trainer.mode={mode}"]
        if mode == "async":
            overrides.append(f"off_policy.max_staleness={max_staleness}")
        overrides.extend(extra)
        settings = dataclasses.replace(s, overrides=tuple(overrides))
        cfg = rl_config(sft_dir, data, slow_tools, out / f"rl_{mode}", settings)
        history = run_train(cfg)
        loop_s = sum(m["timing_s/step"] for m in history)
        metrics = evaluate(rl_model_dir(cfg), f"eval_{mode}")
        result[mode] = {
            "steps_per_min": 60.0 * len(history) / loop_s,
            "loop_s": loop_s,
            "accuracy": metrics["accuracy"],
            "accuracy_stderr": metrics["accuracy_stderr"],
            "tool_call_rate": metrics["tool_call_rate"],
            "trainer_idle_s": sum(m.get("async/trainer_idle_s", 0.0) for m in history),
            "staleness_max": max(m.get("async/staleness/max", 0.0) for m in history),
            "dropped_stale": sum(m.get("async/dropped_stale", 0.0) for m in history),
            "gen_s": sum(m.get("timing_s/gen", m.get("timing_s/wait_for_rollouts", 0.0))
                         for m in history),
            "update_s": sum(m.get("timing_s/update_actor", 0.0) for m in history),
        }
        logging.getLogger(__name__).warning("seed %d %s: %s", seed, mode, result[mode])
    return result


def table(result: dict[str, Any], modes: tuple[str, ...]) -> str:
    sft = result["eval_sft"]
    lines = [
        f"seed {result['seed']}, {result['steps']} GRPO steps; after SFT "
        f"{sft['accuracy']:.3f} ± {sft['accuracy_stderr']:.3f}",
        "| mode | steps/min | loop s | waiting for rollouts s | update s | held-out acc. "
        "| tool-call rate | max staleness | dropped stale |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in modes:
        r = result[mode]
        lines.append(
            f"| {mode} | {r['steps_per_min']:.2f} | {r['loop_s']:.1f} | {r['gen_s']:.1f} "
            f"| {r['update_s']:.1f} | {r['accuracy']:.3f} ± {r['accuracy_stderr']:.3f} "
            f"| {r['tool_call_rate']:.2f} | {r['staleness_max']:.0f} | {r['dropped_stale']:.0f} |"
        )
    return "\n".join(lines)


def summary(results: list[dict[str, Any]], modes: tuple[str, ...]) -> dict[str, Any]:
    """``{mode}_steps_per_min`` (means over the seeds) and ``async_over_sync``."""
    mean = {mode: sum(r[mode]["steps_per_min"] for r in results) / len(results)
            for mode in modes}
    line: dict[str, Any] = {f"{mode}_steps_per_min": round(mean[mode], 3) for mode in modes}
    if "sync" in mean and "async" in mean:
        line["async_over_sync"] = round(mean["async"] / mean["sync"], 3)
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--max-staleness", type=int, default=2, help="async mode's bound")
    parser.add_argument("--out-dir", type=Path, default=Path("outputs/async_vs_sync"))
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every mode's run (repeatable), "
                             "e.g. trainer.trace=false")
    slowed.add_arguments(parser)
    args = parser.parse_args(argv)
    slowed.check_arguments(parser, args)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    sys.path.insert(0, str(ROOT))  # tools.calculator for the latency tool
    modes = tuple(args.modes)
    with slowed.slowed_machine(args) as slowed_record:
        results = [run_seed(args.out_dir.resolve() / f"seed_{seed}", seed, args.steps, modes,
                            args.max_staleness, tuple(args.override))
                   for seed in args.seeds]
    for result in results:
        print(table(result, modes) + "\n")
    line = summary(results, modes)
    line["slowed"] = slowed_record
    line["overrides"] = list(args.override)
    line["seeds"] = results
    print(json.dumps(line, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
