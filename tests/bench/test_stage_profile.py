"""bench/stage_profile.py: the device's busy time as a union of kernel intervals, the top
operators of a profiled stage, and no GPU utilisation where there is no GPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_stage_profile", ROOT / "bench" / "stage_profile.py")
stage_profile = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = stage_profile
_spec.loader.exec_module(stage_profile)


def test_busy_seconds_count_overlapping_kernels_once():
    assert stage_profile.busy_seconds([]) == 0.0
    assert stage_profile.busy_seconds([(0.0, 1.0), (2.0, 3.0)]) == 2.0
    assert stage_profile.busy_seconds([(0.0, 2.0), (1.0, 3.0)]) == 3.0  # overlap once
    assert stage_profile.busy_seconds([(2.0, 3.0), (0.0, 4.0), (1.0, 1.5)]) == 4.0  # nested
    assert stage_profile.busy_seconds([(0.0, 1.0), (1.0, 2.0), (5.0, 5.5)]) == 2.5


def test_a_cpu_profile_names_the_operator_that_took_the_time():
    a = torch.randn(256, 256)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            a @ a
        a + 1
    summary = stage_profile.profile_summary(prof, wall_s=1.0, top=3)
    assert summary["device_busy_s"] is None and summary["busy_fraction"] is None  # no GPU
    assert summary["top_by"] == "cpu" and len(summary["top_ops"]) <= 3
    first = summary["top_ops"][0]
    assert first["name"] in {"aten::mm", "aten::matmul"} and first["calls"] == 20
    assert first["ms"] > 0 and abs(first["share"] - first["ms"] / 1e3) < 1e-12


def test_no_gpu_utilisation_without_a_gpu():
    with stage_profile.UtilizationSampler(index=None) as sampler:
        pass
    assert sampler.summary() is None and sampler.samples == []


def test_utilisation_is_sampled_while_the_block_runs(monkeypatch):
    import time
    import types

    readings = iter([40, 60] + [50] * 1000)
    shutdowns = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: shutdowns.append(1),
        nvmlDeviceGetHandleByIndex=lambda index: ("gpu", index),
        nvmlDeviceGetUtilizationRates=lambda handle: types.SimpleNamespace(gpu=next(readings)),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with stage_profile.UtilizationSampler(interval_s=0.01, index=0) as sampler:
        deadline = time.monotonic() + 5.0
        while len(sampler.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    summary = sampler.summary()
    assert summary["samples"] == len(sampler.samples) >= 3
    assert sampler.samples[:3] == [40, 60, 50]
    assert summary["mean_pct"] == sum(sampler.samples) / len(sampler.samples)
    assert shutdowns == [1]  # NVML released once the block ends
