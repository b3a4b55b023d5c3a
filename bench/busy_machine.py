"""A command's wall time on an idle machine and with other programs keeping cores busy: what a
laptop user sees while a build or a browser runs beside the training.

    python bench/busy_machine.py --runs 3 -- agentrl quickstart --out-dir {out} --seed 0
    python bench/busy_machine.py --runs 3 --busy 1 --out bench/results/x.json -- CMD ...

Each run is a fresh process of `CMD` (`{out}` becomes a new empty directory per run), timed
from start to exit. Runs alternate idle, busy, idle, busy, ... so that a drift of the
machine falls on both. A busy run first starts `--busy` processes that spin on a core each
(`yes > /dev/null`, what the issue measured), and stops them when the command ends. Prints
one JSON line: `idle` and `busy` (median, min, max, each run's seconds), `busy_over_idle`
(median over median: 2.0 is what losing one of two cores costs a program that uses both
fully; far above it is threads waiting on a core they do not have), the machine's cores and
the package versions. A run that fails stops the bench with its output.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from repeat import versions  # noqa: E402


def spinners(count: int) -> list[subprocess.Popen]:
    """`count` processes that each keep one core busy until killed."""
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(count)]


def timed_run(command: list[str], busy: int) -> float:
    """Seconds `command` takes from start to exit, with `busy` spinning processes beside it."""
    out = tempfile.mkdtemp(prefix="busy_machine_")
    argv = [a.replace("{out}", out) for a in command]
    others = spinners(busy)
    try:
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    finally:
        for process in others:
            process.kill()
            process.wait()
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {done.returncode}:\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")  # fmt: skip
    return seconds


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2),
            "max": round(max(values), 2), "each": [round(v, 2) for v in values]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind (idle, busy)")
    parser.add_argument("--busy", type=int, default=1, help="cores kept busy in a busy run")
    parser.add_argument("--out", help="also write the JSON line to this file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS ({out}: a new "
                                                                  "directory per run)")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    if args.runs < 1 or args.busy < 1:
        parser.error("--runs and --busy must be >= 1")
    idle, busy = [], []
    for i in range(args.runs):
        idle.append(timed_run(command, 0))
        busy.append(timed_run(command, args.busy))
        print(f"run {i + 1}: idle {idle[-1]:.1f} s, busy {busy[-1]:.1f} s", file=sys.stderr)
    report = {"command": shlex.join(command), "runs": args.runs, "busy_cores": args.busy,
              "cores": os.cpu_count(), "idle": summary(idle), "busy": summary(busy),
              "busy_over_idle": round(statistics.median(busy) / statistics.median(idle), 3),
              "versions": versions()}  # fmt: skip
    line = json.dumps(report)
    if args.out:
        Path(args.out).write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    main()
