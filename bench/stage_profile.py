"""Where a stage's time goes, for bench/gpu_step.py: how busy the GPU was and which
operators took the time.

- ``UtilizationSampler``: NVML's GPU utilisation (the share of time a kernel was running)
  sampled every ``interval_s`` while a stage runs; ``None`` without a GPU or NVML. A stage
  whose GPU was busy a small share of its wall time is bound by the host (Python, kernel
  launches, syncs), not by the GPU.
- ``profile_summary``: from a ``torch.profiler`` run of one stage, the device's busy
  seconds (the union of its kernels' intervals; ``None`` on CPU) and the operators with the
  most self time (device time on a GPU, CPU time otherwise).
"""

from __future__ import annotations

import statistics
import threading
from typing import Any

import torch


class UtilizationSampler:
    """``with UtilizationSampler() as s: ...`` then ``s.summary()``: mean and samples of
    NVML's GPU utilisation (percent) over the block, or ``None`` where there is no NVML."""

    def __init__(self, interval_s: float = 0.05, index: int | None = None) -> None:
        """``index``: the NVML device; by default the current CUDA device's (None on CPU)."""
        self.interval_s = interval_s
        self.index = index if index is not None else _current_nvml_index()
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None

    def __enter__(self) -> UtilizationSampler:
        if self.index is None:
            return self
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
        except Exception:  # no NVML (CPU machine, or a driver without it): nothing sampled
            self._handle = None
            return self
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        import pynvml

        while not self._stop.wait(self.interval_s):
            self.samples.append(int(pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._handle is not None:
            import pynvml

            pynvml.nvmlShutdown()  # one per nvmlInit

    def summary(self) -> dict[str, float | int] | None:
        if self._handle is None:
            return None
        return {
            "mean_pct": statistics.fmean(self.samples) if self.samples else float("nan"),
            "samples": len(self.samples),
        }


def _current_nvml_index() -> int | None:
    """NVML's index of the current CUDA device (they differ under CUDA_VISIBLE_DEVICES)."""
    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    try:
        return torch.cuda._get_nvml_device_index(device)
    except Exception:  # a torch without the helper, or no NVML: CUDA's own index
        return device


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals (overlapping kernels count once)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def profile_summary(prof: Any, wall_s: float, top: int = 8) -> dict[str, Any]:
    """``device_busy_s`` and ``busy_fraction`` (``None`` without device kernels) and the
    ``top`` operators by self time: name, calls, milliseconds, share of the stage's wall."""
    from torch.autograd import DeviceType

    kernels = [
        (e.time_range.start / 1e6, e.time_range.end / 1e6)
        for e in prof.events()
        if e.device_type == DeviceType.CUDA
    ]
    busy = busy_seconds(kernels) if kernels else None
    on_device = bool(kernels)
    key = "self_device_time_total" if on_device else "self_cpu_time_total"
    ops = sorted(prof.key_averages(), key=lambda e: getattr(e, key), reverse=True)[:top]
    return {
        "wall_s": wall_s,
        "device_busy_s": busy,
        "busy_fraction": busy / wall_s if busy is not None and wall_s > 0 else None,
        "kernels": len(kernels),
        "top_by": "device" if on_device else "cpu",
        "top_ops": [
            {
                "name": e.key,
                "calls": int(e.count),
                "ms": getattr(e, key) / 1e3,
                "share": getattr(e, key) / 1e6 / wall_s if wall_s > 0 else None,
            }
            for e in ops
        ],
    }
