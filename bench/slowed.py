"""Make the machine slower on purpose while a bench measures: the benches' `--cpu-quota` and
`--busy-share` options (bench/async_vs_sync.py, bench/rollout_async_vs_sync.py).

    python bench/rollout_async_vs_sync.py --requests 2048 --capacity 1024 --busy-share 0.3
    python bench/async_vs_sync.py --cpu-quota 0.7

- `--busy-share S` (0 < S < 1): one competing process per core the bench may use, pinned to
  it (`sched_setaffinity`, as `taskset` does) at nice -20, busy for S of every 10 ms period
  and asleep for the rest: each core is the bench's for about 1 - S of the time, the way a
  core 1 / (1 - S) times slower would be (0.3: ~1.43x). It slows every thread, a lone
  event loop included. Without the right to lower the nice value (not root) the competitors
  run at nice 0 and share each busy slice with the bench (the JSON says which).
- `--cpu-quota Q` (0 < Q < 1): the bench's process, and every process it starts, in a new
  cgroup allowed Q of the machine's CPU time (cgroup v2 `cpu.max`, or v1
  `cpu.cfs_quota_us`: Q x cores x 10 ms per 10 ms). Work spread over every core runs about
  1 / Q times slower; one busy thread alone is throttled only when the process's threads
  together want more than Q x cores (on 2 cores at 0.7, 1.4 cores: a lone event loop runs at
  full speed). Needs a writable cgroup hierarchy with the cpu controller (root); otherwise the
  bench stops with the reason: use `--busy-share`.

The bench prints what was done in its JSON line as `slowed`: null on an idle machine, else
`{"mechanism": "busy_share", "share", "period_ms", "cores", "nice"}` or
`{"mechanism": "cpu_quota", "quota", "period_ms", "cores", "cgroup_version", "cgroup"}`.
The competitors exit with the bench (and by themselves if it dies); the cgroup is removed
and the process moved back where it was.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PERIOD_S = 0.010  # the duty cycle's and the quota's period: short, so slowness is even
BUSY_NICE = -20

# one competitor: busy for `share` of each period, asleep for the rest, until its parent dies
_BUSY_LOOP = """
import os, sys, time
share, period, parent = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
start = time.perf_counter()
while os.getppid() == parent:
    busy_until = start + share * period
    while time.perf_counter() < busy_until:
        pass
    start += period
    pause = start - time.perf_counter()
    if pause > 0:
        time.sleep(pause)
    else:
        start = time.perf_counter()
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benches' two options (one at most per run)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--busy-share", type=float, default=None, metavar="S",
                       help="slow every core: a competing process pinned to each, busy S of "
                            "the time at nice -20 (bench/slowed.py)")  # fmt: skip
    group.add_argument("--cpu-quota", type=float, default=None, metavar="Q",
                       help="run under a cgroup CPU quota of Q of the machine's CPU time "
                            "(bench/slowed.py)")  # fmt: skip


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with a message naming the option when a value is out of range."""
    for flag, value in (("--busy-share", args.busy_share), ("--cpu-quota", args.cpu_quota)):
        if value is not None and not 0.0 < value < 1.0:
            parser.error(f"{flag} {value}: must be between 0 and 1 (exclusive)")


@contextlib.contextmanager
def slowed_machine(args: argparse.Namespace) -> Iterator[dict[str, Any] | None]:
    """Slow the machine as `args` asks while the block runs; yields what the JSON records
    (None when neither option is given)."""
    if args.busy_share is not None:
        with busy_share(args.busy_share) as record:
            yield record
    elif args.cpu_quota is not None:
        with cpu_quota(args.cpu_quota) as record:
            yield record
    else:
        yield None


def bench_cores() -> list[int]:
    """The cores this process may run on."""
    return sorted(os.sched_getaffinity(0))


@contextlib.contextmanager
def busy_share(share: float, period_s: float = PERIOD_S,
               cores: list[int] | None = None) -> Iterator[dict[str, Any]]:  # fmt: skip
    """One pinned competitor per core, busy `share` of each `period_s` (module docstring)."""
    cores = bench_cores() if cores is None else cores
    procs: list[subprocess.Popen] = []
    nice = BUSY_NICE
    try:
        for core in cores:
            proc = subprocess.Popen([sys.executable, "-c", _BUSY_LOOP, str(share), str(period_s),
                                     str(os.getpid())])  # fmt: skip
            procs.append(proc)
            os.sched_setaffinity(proc.pid, {core})
            try:
                os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
            except PermissionError:
                nice = 0
        if nice != BUSY_NICE:
            logger.warning("busy share: no right to set nice %d, the competitors run at nice 0 "
                           "(they share each busy slice with the bench)", BUSY_NICE)
        yield {"mechanism": "busy_share", "share": share, "period_ms": period_s * 1000,
               "cores": cores, "nice": nice}  # fmt: skip
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


# ---------------------------------------------------------------------- cgroups


def find_cpu_cgroup(mounts: str, self_cgroup: str) -> tuple[int, Path] | None:
    """(version, this process's cgroup directory) of the hierarchy that holds the cpu
    controller, from /proc/self/mounts and /proc/self/cgroup; None if there is none."""
    paths = {}
    for line in self_cgroup.splitlines():
        number, controllers, path = line.split(":", 2)
        paths[controllers] = path
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point, kind, options = Path(fields[1]), fields[2], fields[3].split(",")
        if kind == "cgroup2" and "" in paths:
            available = point / "cgroup.controllers"
            if available.is_file() and "cpu" in available.read_text().split():
                return 2, point / paths[""].lstrip("/")
        if kind == "cgroup" and "cpu" in options:
            for controllers, path in paths.items():
                if "cpu" in controllers.split(","):
                    return 1, point / path.lstrip("/")
    return None


def quota_files(version: int, quota: float, cores: int, period_s: float) -> dict[str, str]:
    """What to write in the new cgroup for `quota` of `cores` cores."""
    period_us = int(period_s * 1e6)
    allowed_us = max(1000, int(quota * cores * period_us))
    if version == 2:
        return {"cpu.max": f"{allowed_us} {period_us}"}
    return {"cpu.cfs_period_us": str(period_us), "cpu.cfs_quota_us": str(allowed_us)}


@contextlib.contextmanager
def cpu_quota(quota: float, period_s: float = PERIOD_S,
              found: tuple[int, Path] | None = None) -> Iterator[dict[str, Any]]:  # fmt: skip
    """This process (and what it starts) in a new cgroup with `quota` of the machine's CPU
    time while the block runs (module docstring); `found`: the hierarchy's version and this
    process's cgroup (by default from /proc/self)."""
    found = found or find_cpu_cgroup(Path("/proc/self/mounts").read_text(),
                                     Path("/proc/self/cgroup").read_text())  # fmt: skip
    if found is None:
        raise SystemExit("--cpu-quota: no cgroup hierarchy with the cpu controller is mounted; "
                         "use --busy-share")  # fmt: skip
    version, home = found
    cores = bench_cores()
    group = home / f"agentrl-bench-{os.getpid()}"
    # v2: the new cgroup gets the cpu controller from its parent's subtree_control, which a
    # cgroup holding processes may not enable: move in first, enable it, then the quota
    enable = version == 2 and "cpu" not in (home / "cgroup.subtree_control").read_text().split()
    try:
        group.mkdir()
        (group / "cgroup.procs").write_text(str(os.getpid()))
        if enable:
            (home / "cgroup.subtree_control").write_text("+cpu")
        for name, value in quota_files(version, quota, len(cores), period_s).items():
            (group / name).write_text(value)
    except OSError as err:
        _leave(home, group, enable)
        raise SystemExit(f"--cpu-quota: cannot set a CPU quota in {group} ({err}); "
                         "use --busy-share") from None
    try:
        yield {"mechanism": "cpu_quota", "quota": quota, "period_ms": period_s * 1000,
               "cores": cores, "cgroup_version": version, "cgroup": str(group)}  # fmt: skip
    finally:
        _leave(home, group, enable)


def _leave(home: Path, group: Path, enabled: bool) -> None:
    """Move this process back to `home`, undo what was enabled there, remove `group`."""
    with contextlib.suppress(OSError):
        if enabled:
            (home / "cgroup.subtree_control").write_text("-cpu")
        (home / "cgroup.procs").write_text(str(os.getpid()))
    for _ in range(50):  # children that outlived the block keep it busy a moment
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    logger.warning("--cpu-quota: %s still holds processes; left in place", group)
