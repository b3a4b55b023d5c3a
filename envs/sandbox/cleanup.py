"""What a crashed sandbox server left behind, removed when the next one starts.

A run's launcher dies with its server (PR_SET_PDEATHSIG), and with it the run's pid
namespace. What can still remain after a ``kill -9`` of the server:

- staging directories ``agentrl-sandbox-<pid>-*`` of a server pid that no longer exists;
- without a pid namespace, processes of the sandbox uids (``uid_base`` ..
  ``uid_base + max_concurrent - 1``) that have no live launcher above them: they would keep
  counting against their slot's RLIMIT_NPROC, so new runs there could not start threads;
- per-run cgroups of a dead server (``cgroups.remove_stale``).

Directories and processes of live servers are never touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

import psutil

from envs.sandbox import cgroups
from envs.sandbox.config import SandboxConfig
from envs.sandbox.spec import LAUNCHER, STAGING_PREFIX, staging_root

logger = logging.getLogger(__name__)


def _server_pid(name: str) -> int | None:
    head = name[len(STAGING_PREFIX):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def remove_stale_staging(config: SandboxConfig) -> int:
    """Delete the staging directories of servers that are gone; returns how many."""
    removed = 0
    for path in Path(staging_root(config)).glob(f"{STAGING_PREFIX}*"):
        pid = _server_pid(path.name)
        if pid is None or psutil.pid_exists(pid) or not path.is_dir():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def _under_a_launcher(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        for parent in proc.parents():
            with contextlib.suppress(psutil.Error):
                if str(LAUNCHER) in parent.cmdline():
                    return True
    return False


def kill_orphaned_runs(config: SandboxConfig) -> int:
    """SIGKILL processes of the sandbox uids that no live launcher supervises."""
    if os.geteuid() != 0:
        return 0  # no per-run uids: nothing is identifiable as a sandbox process
    uids = range(config.uid_base, config.uid_base + config.max_concurrent)
    killed = 0
    for proc in psutil.process_iter(["uids"]):
        ids = proc.info["uids"]
        if ids is None or ids.real not in uids or _under_a_launcher(proc):
            continue
        with contextlib.suppress(psutil.Error):
            proc.kill()
            killed += 1
    return killed


def clean_up_after_crashed_servers(config: SandboxConfig) -> dict[str, int]:
    """Remove everything dead servers left; returns the counts (also logged)."""
    found = {
        "staging_dirs": remove_stale_staging(config),
        "processes": kill_orphaned_runs(config),
        "cgroups": cgroups.remove_stale() if os.geteuid() == 0 else 0,
    }
    if any(found.values()):
        logger.warning("sandbox: removed what a crashed server left: %s", found)
    return found


__all__ = ["clean_up_after_crashed_servers", "kill_orphaned_runs", "remove_stale_staging"]
