"""Limits on a whole episode, every process of its tree together: memory, number of tasks,
CPU share (cgroups) and the disk it fills in its writable folders (a watch: what they hold
beyond what they held when the run began).

    limits = EpisodeLimits(memory_mb=4096, pids=512, cpus=None, disk_mb=1024)
    limiter = open_limiter(limits, "agentrl-ep-x1", [episode / "workspace"])
    # run_caged(..., limiter=limiter): the child enters the cgroup before it execs, the run
    # is polled, and a tripped limit kills the whole episode (stopped = "limit")
    limiter.close()                                     # every process killed, cgroup removed

cgroups, where this machine lets us write them: v1 (one folder per controller: ``memory``,
``pids``, ``cpu``; what this machine kind mounts) or v2 (one folder, the controllers
enabled in its parent). The episode's cgroup is a child of the trainer's own, so the
trainer's limits still hold above it. A limit trips when the kernel acted on it: an OOM
kill in the cgroup (``memory.oom_control`` / ``memory.events``: ``oom_kill``), a refused
fork (``pids.events``: ``max``); the CPU share only slows the episode. A killed trainer's
episodes die with it (bwrap's ``--die-with-parent``) but their empty cgroups stay: the
first episode of a process removes those older than ``STALE_CGROUP_S``. Where no cgroup is
writable, ``cgroup_support`` says why, a warning names it once, and only the disk watch and
the per-process rlimits (sandbox.py) hold.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
DISK_EVERY_S = 1.0  # the disk watch walks the folders: at most this often
EPISODE_PREFIX = "agentrl-ep-"  # the harness's episode (and check) cgroups' names
STALE_CGROUP_S = 600.0  # an empty episode cgroup this old is a killed run's leftover
EMPTY_ENTRY_BYTES = 4096  # what an entry holding no blocks (an empty file, a link) counts:
                          # a million empty files would otherwise escape the watch


@dataclass(frozen=True)
class EpisodeLimits:
    """The whole episode's limits; None: not limited."""

    memory_mb: int | None = 4096   # memory of all its processes (tmpfs pages included)
    pids: int | None = 4096        # its processes and threads together (a Rust CLI's
                                   # runtime starts a thread per core)
    cpus: float | None = None      # CPU share in cores (1.5: one and a half cores)
    disk_mb: int | None = 1024     # what it adds to its writable folders on disk


def _mountinfo() -> list[tuple[str, Path, str, str]]:
    """(root, mount point, file system type, super options) of each cgroup mount."""
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            dash = fields.index("-")
            kind = fields[dash + 1]
            if kind in ("cgroup", "cgroup2"):
                mounts.append((fields[3], Path(fields[4]), kind, fields[dash + 3]))
    return mounts


def _own_cgroups(pid: str = "self") -> dict[str, str]:
    """This process's (or ``pid``'s) cgroup path per v1 controller, and ``""`` for v2."""
    paths = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _folder(mount: Path, root: str, path: str) -> Path:
    inside = os.path.relpath(path, root) if path.startswith(root) else "."
    folder = (mount / inside).resolve()
    return folder if folder.is_dir() else mount


def _parents() -> tuple[int, dict[str, Path]] | str:
    """(version, the trainer's cgroup folder per controller), or why there is none."""
    own = _own_cgroups()
    mounts = _mountinfo()
    v1 = {}
    for root, mount, kind, options in mounts:
        for name in V1_CONTROLLERS:
            if kind == "cgroup" and name in options.split(",") and name in own:
                v1[name] = _folder(mount, root, own[name])
    if "memory" in v1 and "pids" in v1:
        writable = [name for name, folder in v1.items() if os.access(folder, os.W_OK)]
        if {"memory", "pids"} <= set(writable):
            return 1, {name: v1[name] for name in writable}
        return "the v1 memory and pids cgroups are not writable by this user"
    for root, mount, kind, _ in mounts:
        if kind == "cgroup2" and "" in own:
            folder = _folder(mount, root, own[""])
            controllers = set((folder / "cgroup.controllers").read_text().split())
            if not {"memory", "pids"} <= controllers:
                continue
            if not os.access(folder, os.W_OK):
                return f"the v2 cgroup {folder} is not writable by this user"
            return 2, {"": folder}
    return "no memory and pids cgroup controllers are mounted"


def process_cgroups(pid: int) -> tuple[int, dict[str, Path]] | None:
    """(version, folder per controller) of the memory and pids cgroups process ``pid`` is
    in (a container's, which its engine made and limits), or None where they are not
    found. Never a root cgroup nor the trainer's own: the limiter kills what is in them."""
    own = _own_cgroups(str(pid))
    trainer = _own_cgroups()
    v1: dict[str, Path] = {}
    v2: dict[str, Path] = {}
    for root, mount, kind, options in _mountinfo():
        names = [n for n in V1_CONTROLLERS if n in options.split(",")] if kind == "cgroup" else [""]
        for name in names:
            path = own.get(name)
            inside = path and (path + "/").startswith(root.rstrip("/") + "/")
            if kind in ("cgroup", "cgroup2") and inside and path != trainer.get(name):
                folder = mount / os.path.relpath(path, root)
                if folder.is_dir() and folder != mount:
                    (v1 if kind == "cgroup" else v2)[name] = folder
    if {"memory", "pids"} <= set(v1):
        return 1, v1
    return (2, v2) if v2 else None


def cgroup_support() -> str | None:
    """None where episodes can get cgroups here, else why not (for doctor and the warning)."""
    found = _parents()
    if isinstance(found, str):
        return found
    version, folders = found
    probe = [folder / f"agentrl-probe-{os.getpid()}" for folder in folders.values()]
    try:
        for folder in probe:
            folder.mkdir()
        if version == 2:
            _enable_v2(folders[""])
    except OSError as err:
        return f"cannot make a cgroup under {probe[0].parent}: {err}"
    finally:
        for folder in probe:
            with contextlib.suppress(OSError):
                folder.rmdir()
    return None


def _enable_v2(parent: Path) -> None:
    """Enable the controllers for the parent's children (fails with EBUSY where the
    parent itself holds processes: v2's rule, a reason for the warning)."""
    wanted = {"memory", "pids", "cpu"} & set((parent / "cgroup.controllers").read_text().split())
    enabled = set((parent / "cgroup.subtree_control").read_text().split())
    if wanted - enabled:
        (parent / "cgroup.subtree_control").write_text(
            " ".join(f"+{name}" for name in sorted(wanted - enabled)))


@functools.cache
def _warn_once(reason: str) -> None:
    logger.warning("agent episodes run without cgroup limits (memory, processes, CPU share "
                   "of the whole episode): %s; only per-process rlimits and the disk watch "
                   "hold (agentrl doctor)", reason)


def _read_counter(path: Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


def _disk_bytes(folders: list[Path]) -> int:
    total = 0
    for folder in folders:
        for top, dirs, files in os.walk(folder):
            for name in dirs + files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(top, name)).st_blocks * 512 or EMPTY_ENTRY_BYTES
    return total


class Limiter:
    """One episode's cgroup (or none) and its disk watch."""

    def __init__(self, limits: EpisodeLimits, version: int, folders: dict[str, Path],
                 watched: list[Path]) -> None:
        self.limits = limits
        self.version = version
        self.folders = folders  # controller -> the episode's cgroup folder ("" for v2)
        self.watched = watched
        self._disk_checked = 0.0
        # the limit is on what the run writes: what its folders held when it began (the
        # row's template, or the workspace a check runs over) is not counted
        self.disk_start = _disk_bytes(watched) if limits.disk_mb else 0

    def enter(self) -> None:
        """Put the calling process in the episode's cgroup (the child, before it execs)."""
        for folder in self.folders.values():
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    def tripped(self) -> str | None:
        """``memory``, ``pids`` or ``disk`` when that limit was hit, else None."""
        if self.folders:
            memory = self.folders.get("memory", self.folders.get(""))
            events = "memory.oom_control" if self.version == 1 else "memory.events"
            if _read_counter(memory / events, "oom_kill"):
                return "memory"
            if _read_counter(self.folders.get("pids", memory) / "pids.events", "max"):
                return "pids"
        if self.limits.disk_mb and time.monotonic() - self._disk_checked >= DISK_EVERY_S:
            self._disk_checked = time.monotonic()
            if _disk_bytes(self.watched) - self.disk_start > self.limits.disk_mb << 20:
                return "disk"
        return None

    def pids(self) -> set[int]:
        found: set[int] = set()
        for folder in self.folders.values():
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
        return found

    def kill(self, wait_s: float = 5.0) -> None:
        """SIGKILL every process in the cgroup until it is empty (or ``wait_s`` passed)."""
        if "" in self.folders and (self.folders[""] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (self.folders[""] / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + wait_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def close(self) -> None:
        """Kill what is left and remove the cgroup."""
        self.kill()
        for folder in self.folders.values():
            for _ in range(50):  # rmdir waits for the last exits to be reaped
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def sweep_stale_cgroups(parents: dict[str, Path], prefix: str = EPISODE_PREFIX,
                        older_than_s: float = STALE_CGROUP_S) -> list[Path]:
    """Remove the empty cgroups named ``prefix*`` under ``parents`` made more than
    ``older_than_s`` ago: what a killed trainer left (its episodes' processes died with it,
    their cgroups stayed). A cgroup that holds a process cannot be removed (rmdir fails);
    the age spares one made a moment ago whose first process has not entered yet."""
    removed = []
    now = time.time()
    for parent in parents.values():
        with contextlib.suppress(OSError):
            for folder in parent.iterdir():
                if not (folder.name.startswith(prefix) and folder.is_dir()):
                    continue
                with contextlib.suppress(OSError):
                    if now - folder.stat().st_mtime > older_than_s:
                        folder.rmdir()
                        removed.append(folder)
    if removed:
        logger.info("removed %d empty episode cgroups a stopped run left", len(removed))
    return removed


@functools.cache
def _sweep_once(parents: tuple[tuple[str, Path], ...]) -> None:
    sweep_stale_cgroups(dict(parents))


def open_limiter(limits: EpisodeLimits, name: str, watched: list[Path]) -> Limiter:
    """The episode's cgroup named ``name`` with ``limits`` written, under the trainer's own
    (the first time, what a killed run left there is swept: ``sweep_stale_cgroups``);
    without cgroups (a warning, once) a limiter that only watches the disk."""
    found = _parents() if (limits.memory_mb or limits.pids or limits.cpus) else "not asked"
    if isinstance(found, str):
        if found != "not asked":
            _warn_once(found)
        return Limiter(limits, 0, {}, watched)
    version, parents = found
    _sweep_once(tuple(sorted(parents.items())))
    folders: dict[str, Path] = {}
    try:
        if version == 2:
            _enable_v2(parents[""])
        for controller, parent in parents.items():
            folders[controller] = parent / name
            folders[controller].mkdir()
        _write_limits(limits, version, folders)
    except OSError as err:
        Limiter(limits, version, folders, watched).close()
        _warn_once(f"cannot make a cgroup under {next(iter(parents.values()))}: {err}")
        return Limiter(limits, 0, {}, watched)
    return Limiter(limits, version, folders, watched)


def _write_limits(limits: EpisodeLimits, version: int, folders: dict[str, Path]) -> None:
    memory = str(limits.memory_mb << 20) if limits.memory_mb else None
    quota = int(limits.cpus * CPU_PERIOD_US) if limits.cpus else None
    if version == 2:
        folder = folders[""]
        if memory:
            (folder / "memory.max").write_text(memory)
            with contextlib.suppress(OSError):
                (folder / "memory.swap.max").write_text("0")
        if limits.pids:
            (folder / "pids.max").write_text(str(limits.pids))
        if quota and (folder / "cpu.max").exists():
            (folder / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        return
    if memory:
        (folders["memory"] / "memory.limit_in_bytes").write_text(memory)
        with contextlib.suppress(OSError):  # no swap accounting: the limit above holds alone
            (folders["memory"] / "memory.memsw.limit_in_bytes").write_text(memory)
    if limits.pids:
        (folders["pids"] / "pids.max").write_text(str(limits.pids))
    if quota and "cpu" in folders:
        (folders["cpu"] / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
        (folders["cpu"] / "cpu.cfs_quota_us").write_text(str(quota))


__all__ = ["EpisodeLimits", "Limiter", "cgroup_support", "open_limiter", "process_cgroups",
           "sweep_stale_cgroups"]
