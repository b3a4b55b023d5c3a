"""Per-run cgroups: one memory and one process limit over all of a run's processes.

RLIMIT_AS and RLIMIT_NPROC are per process (or per uid); a run that forks three children
could use four times its memory. With a root server and a writable cgroup hierarchy (v2, or
v1's ``memory`` and ``pids`` controllers), every run gets its own cgroup, which the launcher
joins before it starts anything, so the limits cover the whole run:

    <root>/agentrl-sandbox-<server pid>-<id>/run-<slot>/
        v2: memory.max, memory.swap.max = 0, pids.max
        v1: memory/.../memory.limit_in_bytes (+ memsw), pids/.../pids.max

After the run every process left in the cgroup is killed and the cgroup removed, and the
server's folder with it once no other run holds one there (the next run makes it again): a
server, or a runner nobody closed, leaves no empty cgroup behind between runs. A server that
starts removes what others left: the cgroups of servers that died (their pid is gone), and
any empty ``agentrl-sandbox-*`` older than the harness's ``STALE_CGROUP_S`` whatever its pid (a pid the
kernel gave again; the harness's sweep, ``agentrl.agents.limits.sweep_stale_cgroups``).
Where this is impossible (not root, no delegation, a read-only /sys/fs/cgroup)
``detect_cgroups`` says why and the sandbox runs with the per-process limits only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from agentrl.agents.limits import sweep_stale_cgroups

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "agentrl-sandbox-"
KILL_ROUNDS = 50  # rounds of reading cgroup.procs and killing (v1, or v2 without cgroup.kill)


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _pids(directory: Path) -> list[int]:
    try:
        return [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _kill_and_remove(directory: Path) -> None:
    """SIGKILL every process in a cgroup (and its children) and remove it."""
    if not directory.is_dir():
        return
    for child in [d for d in directory.iterdir() if d.is_dir()]:
        _kill_and_remove(child)
    kill_file = directory / "cgroup.kill"
    if kill_file.exists():
        with contextlib.suppress(OSError):
            _write(kill_file, "1")
    for _ in range(KILL_ROUNDS):
        pids = _pids(directory)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    for _ in range(KILL_ROUNDS):  # rmdir fails while the killed processes are exiting
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    logger.warning("sandbox: could not remove cgroup %s", directory)


def _hierarchies() -> tuple[str | None, list[Path]]:
    """("v2", [root]) on the unified hierarchy, ("v1", [memory, pids]) on the legacy one."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return "v2", [CGROUP_ROOT]
    memory, pids = CGROUP_ROOT / "memory", CGROUP_ROOT / "pids"
    if (memory / "memory.limit_in_bytes").exists() and (pids / "cgroup.procs").exists():
        return "v1", [memory, pids]
    return None, []


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> int:
    """Remove the cgroups (and kill the processes) of sandbox servers that are gone, then
    the empty ones older than ``STALE_CGROUP_S`` whatever their pid; returns how many."""
    _, roots = _hierarchies()
    removed = 0
    for root in roots:
        for directory in root.glob(f"{PREFIX}*"):
            try:
                pid = int(directory.name[len(PREFIX):].split("-", 1)[0])
            except ValueError:
                continue
            if not _pid_alive(pid):
                _kill_and_remove(directory)
                removed += 1
    if removed:
        logger.warning("sandbox: removed %d cgroup(s) a crashed server left", removed)
    return removed + len(sweep_stale_cgroups({str(root): root for root in roots}, PREFIX))


@dataclass
class RunCgroup:
    """The cgroup(s) of one run."""

    version: str
    dirs: list[Path]
    parents: list[Path]  # the server's folders: removed with the last run in them

    def procs_files(self) -> tuple[str, ...]:
        """The files the launcher writes its pid to (one per hierarchy)."""
        return tuple(str(d / "cgroup.procs") for d in self.dirs)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the run for the memory limit."""
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        try:
            text = (self.dirs[0] / name).read_text()
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return False

    def close(self) -> None:
        """Kill whatever is left of the run, remove its cgroup(s) and the server's folder
        where no other run holds one (rmdir refuses a folder that still has a cgroup)."""
        for directory in self.dirs:
            _kill_and_remove(directory)
        for parent in self.parents:
            with contextlib.suppress(OSError):
                parent.rmdir()


class CgroupManager:
    """Makes one cgroup per run under this server's own parent cgroup(s), which exist
    while a run holds one (``make`` makes them, the last ``RunCgroup.close`` removes them;
    both run on the event loop's thread, so no run's ``make`` falls between the two)."""

    def __init__(self, version: str, parents: list[Path]) -> None:
        self.version = version
        self.parents = parents

    @classmethod
    def create(cls) -> CgroupManager:
        """This server's parent cgroup(s), made and removed again to see that they can be;
        raises OSError where they cannot."""
        version, roots = _hierarchies()
        if version is None:
            raise OSError("no cgroup v2 hierarchy and no cgroup v1 memory+pids controllers")
        name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        manager = cls(version, [root / name for root in roots])
        try:
            manager._make_parents()
        finally:
            manager.close()
        return manager

    def _make_parents(self) -> None:
        for parent in self.parents:
            if not parent.is_dir():
                parent.mkdir()
                if self.version == "v2":
                    _write(parent / "cgroup.subtree_control", "+memory +pids")

    def make(self, slot: int, memory_mb: int, max_processes: int) -> RunCgroup:
        """A fresh cgroup for the run in ``slot``; raises OSError on failure."""
        dirs = [parent / f"run-{slot}" for parent in self.parents]
        run = RunCgroup(self.version, dirs, self.parents)
        limit = str(memory_mb << 20)
        try:
            self._make_parents()
            for directory in dirs:
                _kill_and_remove(directory)  # a previous run's, should it remain
                directory.mkdir()
            if self.version == "v2":
                (directory,) = dirs
                _write(directory / "memory.max", limit)
                with contextlib.suppress(OSError):  # no swap accounting: nothing to cap
                    _write(directory / "memory.swap.max", "0")
                _write(directory / "pids.max", str(max_processes))
            else:
                memory, pids = dirs
                _write(memory / "memory.limit_in_bytes", limit)
                memsw = memory / "memory.memsw.limit_in_bytes"
                if memsw.exists():
                    with contextlib.suppress(OSError):
                        _write(memsw, limit)
                _write(pids / "pids.max", str(max_processes))
        except OSError:
            run.close()
            raise
        return run

    def close(self) -> None:
        for parent in self.parents:
            _kill_and_remove(parent)


def detect_cgroups(config, root: bool) -> tuple[str | None, str | None]:
    """``(version, None)`` when per-run cgroups work here, else ``(None, why not)``."""
    if not config.cgroup:
        return None, None
    if not root:
        return None, "per-run cgroups need a root server: memory is limited per process only"
    try:
        manager = CgroupManager.create()
    except OSError as e:
        return None, f"per-run cgroups unavailable ({e}): memory is limited per process only"
    try:
        manager.make(0, 64, 8).close()
    except OSError as e:
        return None, f"per-run cgroups unavailable ({e}): memory is limited per process only"
    finally:
        manager.close()
    return manager.version, None


__all__ = ["CgroupManager", "RunCgroup", "detect_cgroups", "remove_stale"]
