"""What `trainer.trace` costs: smoke-size training with the trace off and on, each run in a
fresh process, alternating, and the ratio of their median step times.

    python bench/trace_overhead.py                     # 3 runs each of 5 steps
    python bench/trace_overhead.py --repeats 1 --steps 3 --size nano

Each run is `agentrl smoke` (agentrl/smoke.py: the tiny model, the calculator, GRPO on CPU,
in-process workers) with ``trainer.trace=false`` or ``true``; its step time is the median of
``timing_s/step`` over its steps after the first (the first pays for warm-up). The variant
runs alternate (off, on, off, on, ...) so that a machine that slows down mid-bench slows
both. Prints one JSON line: the median step seconds of each variant over its runs, every
run's, and ``on_over_off`` (the issue's bar: at most 1.03).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
from pathlib import Path

from fresh_process import in_fresh_processes, versions

VARIANTS = ("off", "on")


def run_variant(variant: str, steps: int, size: str, seed: int) -> dict:
    """One smoke run with the trace `variant`; its step times and trace files."""
    from agentrl.smoke import run_smoke

    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as out:
        history = run_smoke(Path(out), steps=steps, size=size, seed=seed,
                            overrides=[f"trainer.trace={variant == 'on'}",
                                       "trainer.logger=[file]"])  # fmt: skip
        traces = len(list((Path(out) / "trace").glob("step_*.json")))
    step_s = [m["timing_s/step"] for m in history]
    return {"variant": variant, "step_s": step_s, "median_step_s": statistics.median(step_s[1:]),
            "trace_files": traces}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="training steps per run (>= 2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant")
    parser.add_argument("--size", default="tiny", help="tiny model size (make-tiny-model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is left out as warm-up)")
    if args.variant is not None:
        print(json.dumps(run_variant(args.variant, args.steps, args.size, args.seed)))
        return
    argv = ["--steps", str(args.steps), "--size", args.size, "--seed", str(args.seed)]
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for _ in range(args.repeats):
        for variant, result in in_fresh_processes(__file__, "--variant", VARIANTS, argv).items():
            runs[variant].append(result)
    if runs["off"][0]["trace_files"] != 0 or runs["on"][0]["trace_files"] != args.steps:
        raise RuntimeError(f"trace files off/on: {runs['off'][0]['trace_files']}/"
                           f"{runs['on'][0]['trace_files']}, expected 0/{args.steps}")
    median = {v: statistics.median(r["median_step_s"] for r in runs[v]) for v in VARIANTS}
    print(json.dumps({
        "steps": args.steps, "repeats": args.repeats, "size": args.size,
        "off_step_s": round(median["off"], 4), "on_step_s": round(median["on"], 4),
        "on_over_off": round(median["on"] / median["off"], 4),
        "runs": {v: [round(r["median_step_s"], 4) for r in runs[v]] for v in VARIANTS},
        **versions(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
