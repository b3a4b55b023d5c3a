"""bench/shared_prefix.py at a tiny size: both workloads, the tree's tokens against flat."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow
def test_the_bench_compares_both_workloads_and_the_paths_agree(capsys):
    sys.path.insert(0, str(BENCH))
    try:
        bench = importlib.import_module("shared_prefix")
    finally:
        sys.path.remove(str(BENCH))
    assert bench.main(["--size", "nano", "--response", "6", "--segments", "3",
                       "--repeats", "1"]) == 0  # fmt: skip
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    group, session = line["grpo_group"], line["forked_session"]
    assert group["rows"] == 8 and group["levels"] == 2 and session["rows"] == 3
    # the prompt (60 tokens) once instead of 8 times: (60 + 8 x 6) / (8 x 66) at most
    assert group["tokens_ratio"] <= (60 + 8 * 6) / (8 * 66)
    assert session["tokens_ratio"] < 1
    for workload in (group, session):
        assert workload["max_abs_diff"] < 1e-4
        assert workload["step_s_flat"] > 0 and workload["step_s_shared"] > 0
