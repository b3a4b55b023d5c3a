"""Run a bench several times, each run a fresh process, and print every figure of its JSON
line as the median of the runs with their range: one lucky run is not a figure.

    python bench/repeat.py --runs 3 -- python bench/rollout_async_vs_sync.py --requests 2048 --capacity 1024
    python bench/repeat.py --runs 3 --out bench/results/x.json -- python bench/grpo_step.py

The runs go one after another (a bench's timings are only right on an otherwise idle
machine: run nothing else meanwhile). Each run's stdout passes through; its last line that
parses as a JSON object is its result. Every number in it (nested keys joined by `.`)
becomes a figure. The script ends with a table (`key  median  (min - max)`) and one JSON
line: `command`, `runs`, `median`, `min`, `max` (figure -> value), `each` (every run's own
line) and `versions` (Python, the platform and the packages the figures depend on), also
written to `--out` when given. A run that exits non-zero or prints no JSON line stops the
script with an error that names the run.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import statistics
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "transformers", "tokenizers", "ray", "numpy", "httpx", "uvicorn", "agentrl")


def versions(packages: Iterable[str] = PACKAGES) -> dict[str, str]:
    """Python, the platform and the installed version of each package (`-` if absent)."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "-"
    return out


def last_json_line(stdout: str) -> dict[str, Any] | None:
    """The last line of `stdout` that parses as a JSON object, or None."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None


def numbers(result: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every number of `result` (booleans left out), nested keys joined by `.`."""
    out: dict[str, float] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= numbers(value, name + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def summarize(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """`median`, `min` and `max` of each figure present in every run."""
    figures = [numbers(r) for r in results]
    keys = [k for k in figures[0] if all(k in f for f in figures)]
    return {
        "median": {k: statistics.median(f[k] for f in figures) for k in keys},
        "min": {k: min(f[k] for f in figures) for k in keys},
        "max": {k: max(f[k] for f in figures) for k in keys},
    }


def run_once(command: Sequence[str], index: int) -> dict[str, Any]:
    proc = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"run {index + 1} of {' '.join(command)} exited with {proc.returncode}")
    result = last_json_line(proc.stdout)
    if result is None:
        raise SystemExit(f"run {index + 1} of {' '.join(command)} printed no JSON line")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes (default 3)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON line here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the bench command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the bench command after --")
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    results = [run_once(command, i) for i in range(args.runs)]
    summary = summarize(results)
    width = max((len(k) for k in summary["median"]), default=0)
    sys.stdout.write(f"\n{args.runs} runs of: {' '.join(command)}\n")
    for key, median in summary["median"].items():
        sys.stdout.write(f"{key:<{width}}  {median:12.4g}  ({summary['min'][key]:.4g} - "
                         f"{summary['max'][key]:.4g})\n")  # fmt: skip
    line = {"command": " ".join(command), "runs": args.runs, **summary, "each": results,
            "versions": versions()}  # fmt: skip
    text = json.dumps(line)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
