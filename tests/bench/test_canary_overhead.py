"""bench/canary_overhead.py runs end to end at its smallest size and reports the canary's
seconds over a step's (no timing bar here: the machine is shared; the bench is timed idle)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_canary_bench_prints_the_ratio_of_canary_to_step_seconds():
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "canary_overhead.py"),
                          "--repeats", "1", "--steps", "2", "--size", "nano"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    line = json.loads([ln for ln in run.stdout.splitlines() if ln.startswith("{")][-1])
    assert len(line["canary_s"][0]) == 2 and all(c > 0 for c in line["canary_s"][0])
    ratio = line["canary_s"][0][1] / line["step_s"][0][1]
    assert line["canary_over_step"] == pytest.approx(ratio, rel=1e-3) and ratio > 0
    assert {"python", "torch", "transformers", "machine"} <= set(line)
