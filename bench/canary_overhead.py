"""What the canary after each weight sync costs (``actor_rollout_ref.rollout.canary``): its
seconds over a sync-mode step's, on the CPU quickstart's shape.

    python bench/canary_overhead.py                     # 3 runs of 5 steps
    python bench/canary_overhead.py --repeats 1 --steps 2 --size nano

Each run is `agentrl smoke` (agentrl/smoke.py: the quickstart's tiny model, calculator task
and GRPO on CPU, sync mode, in-process workers, the embedded hf engine) with
``rollout.canary=every_sync`` in a fresh process. Per step the canary's own time is its
metric ``timing/canary_s`` (the trainer's greedy canary set at the first sync, the
trainer's forward on it and the engine's scoring after every sync); a run's figure is the
median over its steps after the first (the first pays for warm-up and builds the set) of
canary seconds / ``timing_s/step``. Prints one JSON line: the median of the runs' ratios
(``canary_over_step``; the issue's bar: at most 0.03), each run's, versions and machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import tempfile
from pathlib import Path

from fresh_process import in_fresh_processes, versions

VARIANTS = ("canary",)
# --shape quickstart: the smoke run at the quickstart's batch (recipes/quickstart/config.yaml:
# 16 prompts x 8 samples, responses up to 160 tokens over up to 3 turns, mini-batches of 8)
SHAPES = {
    "smoke": (),
    "quickstart": ("data.train_batch_size=16", "actor_rollout_ref.rollout.n=8",
                   "data.max_response_length=160",
                   "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
                   "actor_rollout_ref.actor.ppo_mini_batch_size=8"),
}


def run_variant(variant: str, steps: int, size: str, seed: int, shape: str = "smoke") -> dict:
    """One smoke run (at ``shape``'s batch) with the canary after every sync; its step and
    canary seconds."""
    from agentrl.smoke import run_smoke

    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as out:
        history = run_smoke(Path(out), steps=steps, size=size, seed=seed,
                            overrides=["actor_rollout_ref.rollout.canary=every_sync",
                                       "trainer.logger=[file]", *SHAPES[shape]])  # fmt: skip
    step_s = [m["timing_s/step"] for m in history]
    canary_s = [m.get("timing/canary_s", float("nan")) for m in history]
    ratios = [c / s for c, s in zip(canary_s[1:], step_s[1:], strict=True)]
    return {"variant": variant, "step_s": step_s, "canary_s": canary_s,
            "median_ratio": statistics.median(ratios)}  # fmt: skip


def _sig(x: float) -> float:
    """``x`` to six significant digits: fixed decimals would lose a short canary's ratio."""
    return float(f"{x:.6g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="training steps per run (>= 2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs (each a fresh process)")
    parser.add_argument("--size", default="tiny", help="tiny model size (make-tiny-model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smoke",
                        help="the step's batch: the smoke run's, or the quickstart's")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is left out as warm-up)")
    if args.variant is not None:
        print(json.dumps(run_variant(args.variant, args.steps, args.size, args.seed,
                                     args.shape)))
        return
    argv = ["--steps", str(args.steps), "--size", args.size, "--seed", str(args.seed),
            "--shape", args.shape]
    runs = [in_fresh_processes(__file__, "--variant", VARIANTS, argv)["canary"]
            for _ in range(args.repeats)]
    print(json.dumps({
        "steps": args.steps, "repeats": args.repeats, "size": args.size, "shape": args.shape,
        "canary_over_step": _sig(statistics.median(r["median_ratio"] for r in runs)),
        "runs": [_sig(r["median_ratio"]) for r in runs],
        "canary_s": [[_sig(c) for c in r["canary_s"]] for r in runs],
        "step_s": [[_sig(s) for s in r["step_s"]] for r in runs],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        **versions(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
