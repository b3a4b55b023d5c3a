"""Time the whole test suite once, as `bash scripts/test.sh` runs it, in a set-up checkout.

    python bench/test_suite.py --checkout /tmp/clone
    python bench/repeat.py --runs 3 --out bench/results/test_suite_cpu_DATE.json -- \\
        python bench/test_suite.py --checkout /tmp/clone

The checkout should be a fresh clone set up as CI sets it up (`.ci/run`: scripts/setup_env.sh,
scripts/setup_vllm_env.sh, the agent CLIs, chromium, bubblewrap, podman): the tests marked
`vllm` are required here (AGENTRL_REQUIRE_VLLM=1) when the checkout has `.venv-vllm`, and the
harness tests run where AGENTRL_CLAUDE_BIN / AGENTRL_CODEX_BIN are set. Each run is one fresh
`bash scripts/test.sh` with a random test order (its seed is in the JSON line) and the
workers `AGENTRL_TEST_WORKERS` gives (scripts/test.sh's default when unset). Timings are only
right on an otherwise idle machine. The run's whole output (with pytest's 30 slowest
durations) goes to `--log`; the last stdout
line is JSON: `wall_s`, `wall_min`, `ratio_to_target` (wall / 15 minutes), the pytest counts
and the order seed. A suite with a failed test exits 1: its time is not a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 15 * 60
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def parse_counts(summary: str) -> dict[str, int]:
    """{outcome: count} from pytest's last summary line (`error` and `errors` both `errors`)."""
    counts: dict[str, int] = {}
    for number, outcome in COUNTS.findall(summary):
        key = "errors" if outcome.startswith("error") else outcome
        counts[key] = counts.get(key, 0) + int(number)
    return counts


def run_suite(checkout: Path, log: Path, seed: int) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "AGENTRL_REQUIRE_CHROMIUM": "1"}  # fmt: skip
    if (checkout / ".venv-vllm").is_dir():
        env["AGENTRL_REQUIRE_VLLM"] = "1"
    cmd = ["bash", "scripts/test.sh", "-q", "-p", "no:cacheprovider", "-p", "randomly",
           f"--randomly-seed={seed}", "--durations=30"]  # fmt: skip
    start = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(cmd, cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - start
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    counts = parse_counts(lines[-1] if lines else "")
    return {
        "wall_s": round(wall, 1),
        "wall_min": round(wall / 60, 2),
        "ratio_to_target": round(wall / TARGET_S, 3),
        "returncode": done.returncode,
        "workers": os.environ.get("AGENTRL_TEST_WORKERS", "default"),
        "randomly_seed": seed,
        **counts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parents[1],
                        help="a set-up clone of the repository (default: this one)")
    parser.add_argument("--log", type=Path, default=None,
                        help="where pytest's output goes (default: "
                             "CHECKOUT/test_suite_SEED.log)")
    parser.add_argument("--seed", type=int, default=None,
                        help="pytest-randomly's order seed (default: a new random one)")
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    if not (checkout / "scripts" / "test.sh").is_file():
        parser.error(f"--checkout {checkout}: no scripts/test.sh there")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    result = run_suite(checkout, args.log or checkout / f"test_suite_{seed}.log", seed)
    print(f"suite: {result['wall_min']} min ({result['ratio_to_target']}x the 15-minute "
          f"target), {result.get('passed', 0)} passed, {result.get('failed', 0)} failed",
          file=sys.stderr)
    print(json.dumps(result))
    return 0 if result["returncode"] == 0 and not result.get("failed") else 1


if __name__ == "__main__":
    sys.exit(main())
