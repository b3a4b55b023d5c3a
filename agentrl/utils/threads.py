"""Intra-op CPU threads that follow the cores other programs leave free.

    threads = CPUThreads()          # one per loop that computes on the CPU
    for batch in loader:
        threads.tick()              # cheap; re-decides at most once a second
        loss = model(batch).loss ...

torch's CPU ops run on an OpenMP pool of one thread per core, whose workers spin-wait
between parallel regions. On a laptop something else always runs: when another program takes
one of two cores, every region waits for the worker that has no core, and a small model's
step gets several times slower, not 2x. Measured on 2 cores (torch 2.13 CPU, the
quickstart's nano model, one SFT step of 32 x 96 tokens, median of 25 steps, a few runs each,
2026-11-28; a probe, not a bench): idle, 2 threads 63 ms and 1 thread 106 ms; with
`yes > /dev/null` on one core, 2 threads 280-640 ms and 1 thread 112 ms.
OpenMP's passive wait (`OMP_WAIT_POLICY=PASSIVE`) mends the busy case (117-132 ms) but costs
the idle one (115 ms), so the fix is the thread count: `tick` reads how much CPU the rest of
the machine used since its last reading (`/proc/stat` less this process's own time) and uses
as many threads as cores are left free (at least 1, at most the cores this process may use).

`AGENTRL_CPU_THREADS` (the one setting; every agentrl process reads it, and child processes
inherit it): `auto` (default) follows the free cores as above; a number fixes the thread
count. On a machine without `/proc` the count is left as torch chose it.

The setting is per OS thread (OpenMP's), so each thread that computes ticks its own
`CPUThreads` (the SFT loop, the hf engine's generation thread, the actor's update).
"""

from __future__ import annotations

import logging
import os
import threading
import time

import torch

logger = logging.getLogger(__name__)

THREADS_ENV = "AGENTRL_CPU_THREADS"
BUSY_CORE = 0.6  # CPU used by other programs, in cores, that counts as a core taken
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _machine_busy_ticks() -> int | None:
    """Busy clock ticks of every CPU since boot (`/proc/stat`), None without it."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()[1:]
    except OSError:
        return None
    values = [int(v) for v in fields[:8]]
    return sum(values) - values[3] - values[4]  # all but idle and iowait


def _own_ticks() -> int | None:
    """This process's CPU clock ticks (user + system, every thread)."""
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


def threads_for(others: float, cores: int) -> int:
    """Threads for `cores` usable cores when other programs use `others` cores' worth."""
    taken = int(others // 1) + (1 if others % 1 >= BUSY_CORE else 0)
    return max(1, min(cores, cores - taken))


class CPUThreads:
    """Sets this OS thread's torch intra-op thread count at each `tick` (module docstring).

    Args:
        interval_s: seconds between two readings of the machine's load.
        setting: `AGENTRL_CPU_THREADS`'s value (None: read the environment).
    """

    def __init__(self, interval_s: float = 1.0, setting: str | None = None) -> None:
        setting = (setting if setting is not None else os.environ.get(THREADS_ENV, "auto"))
        setting = setting.strip().lower() or "auto"
        self.cores = usable_cores()
        self.fixed: int | None = None
        if setting != "auto":
            try:
                self.fixed = int(setting)
            except ValueError:
                raise ValueError(f"{THREADS_ENV}={setting!r}: use auto or a number of threads "
                                 "(>= 1)") from None  # fmt: skip
            if self.fixed < 1:
                raise ValueError(f"{THREADS_ENV}={setting!r}: use auto or a number >= 1")
        self.interval_s = interval_s
        self.threads = self.fixed or self.cores
        self._enabled = self.fixed is not None or _machine_busy_ticks() is not None
        self._last: tuple[float, int, int] | None = None
        self._applied = threading.local()
        self.changes = 0

    def tick(self) -> int:
        """Re-decide (at most every `interval_s`) and apply to the calling thread; returns the
        thread count it uses."""
        if not self._enabled:
            return torch.get_num_threads()
        if self.fixed is None:
            self._reread()
        if getattr(self._applied, "threads", None) != self.threads:
            torch.set_num_threads(self.threads)
            self._applied.threads = self.threads
        return self.threads

    def _reread(self) -> None:
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < self.interval_s:
            return
        busy, own = _machine_busy_ticks(), _own_ticks()
        if busy is None or own is None:
            return
        if self._last is not None:
            seconds = max(now - self._last[0], 1e-3)
            others = max(0.0, (busy - self._last[1]) - (own - self._last[2])) / _CLOCK_TICKS
            threads = threads_for(others / seconds, self.cores)
            if threads != self.threads:
                logger.debug("CPU threads %d -> %d (other programs use %.2f cores)",
                             self.threads, threads, others / seconds)  # fmt: skip
                self.threads = threads
                self.changes += 1
        self._last = (now, busy, own)


__all__ = ["BUSY_CORE", "CPUThreads", "THREADS_ENV", "threads_for", "usable_cores"]
