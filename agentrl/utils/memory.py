"""Peak memory of this process since the last reading, as step metrics.

- ``perf/max_memory_allocated_gb`` and ``perf/max_memory_reserved_gb``: the CUDA caching
  allocator's peaks on the device (GPU only; verl's names);
- ``perf/peak_rss_gb``: the process's peak resident memory (Linux ``VmHWM``), the CPU
  counterpart, which also holds a CPU model's activations and logits.

Each reading resets the peaks (``torch.cuda.reset_peak_memory_stats``; writing ``5`` to
``/proc/self/clear_refs``), so the numbers of a step are that step's. Where the peak RSS
cannot be reset (not Linux), ``ru_maxrss`` (the process's lifetime peak) is reported.
Nothing here synchronises the device.
"""

from __future__ import annotations

import logging
import resource
import sys
from pathlib import Path

import torch

logger = logging.getLogger(__name__)
_GB = float(2**30)
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def peak_rss_bytes() -> int:
    """This process's peak resident memory since the last reset (or since it started)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window; False where the system does not allow it."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def peak_memory_metrics(device: torch.device | str | None = None) -> dict[str, float]:
    """The peaks since the previous call (see the module docstring), then reset them."""
    metrics: dict[str, float] = {}
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda" and torch.cuda.is_available():
        metrics["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(device) / _GB
        metrics["perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved(device) / _GB
        torch.cuda.reset_peak_memory_stats(device)
    metrics["perf/peak_rss_gb"] = peak_rss_bytes() / _GB
    reset_peak_rss()
    return metrics
