"""Per-step peak memory: a reading sees the step's peak, and the next starts afresh."""

from __future__ import annotations

import sys

import pytest
import torch

from agentrl.utils.memory import peak_memory_metrics, peak_rss_bytes, reset_peak_rss


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_each_reading_reports_the_peak_since_the_last_one():
    peak_memory_metrics("cpu")  # start a window
    block = torch.ones(2**27)  # 512 MB, touched
    del block
    first = peak_memory_metrics("cpu")["perf/peak_rss_gb"]
    second = peak_memory_metrics("cpu")["perf/peak_rss_gb"]
    assert first - second > 0.4  # the block counted in its own window only
    assert second > 0.05  # the process itself is still resident


def test_the_peak_never_falls_below_what_is_resident():
    assert reset_peak_rss() in (True, False)
    keep = torch.ones(2**25)  # 128 MB alive
    assert peak_rss_bytes() >= keep.numel() * 4
    metrics = peak_memory_metrics(None)
    assert set(metrics) == {"perf/peak_rss_gb"}  # no GPU numbers without a CUDA device
    del keep
