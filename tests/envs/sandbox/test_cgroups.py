"""Per-run cgroups of the code sandbox: none is left behind when its run ends (the server's
folder goes with the last run in it, closed runner or not), and a server that starts
removes what dead servers left and the empty ones too old to be a live run's. Skipped,
saying why, where per-run cgroups cannot be made here (not root, no writable hierarchy)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.agents.limits import STALE_CGROUP_S
from envs.sandbox import cgroups
from envs.sandbox.config import SandboxConfig
from envs.sandbox.isolation import probe_isolation
from envs.sandbox.runner import SandboxRunner
from envs.sandbox.uid_range import claim_uid_range

UID_BASE = 1_650_000  # the range this module's runners hold (the fixture claims it)


def _ours(pid: int | None = None) -> list[Path]:
    """The sandbox cgroups of server ``pid`` (this process by default) in every hierarchy."""
    _, roots = cgroups._hierarchies()
    return sorted(p for root in roots
                  for p in root.glob(f"{cgroups.PREFIX}{pid or os.getpid()}-*"))


@pytest.fixture(scope="module")
def setup():
    config, held = claim_uid_range(SandboxConfig(uid_base=UID_BASE, max_concurrent=2))
    config = config.validate()
    version, why = cgroups.detect_cgroups(config, os.geteuid() == 0)
    if version is None:
        if held is not None:
            held.release()
        pytest.skip(f"no per-run cgroups here: {why or 'cgroup off in the config'}")
    yield config, probe_isolation(config)
    if held is not None:
        held.release()


def test_no_cgroup_is_left_when_runs_end_though_the_runner_is_never_closed(setup):
    config, isolation = setup
    before = _ours()
    seen: dict[Path, list[str]] = {}

    async def two_runs():
        runner = SandboxRunner(config, isolation)  # max_concurrent=2, never closed
        code = "import time; time.sleep(1.0); print('ok')"
        runs = [asyncio.ensure_future(runner.run(code, 10.0)) for _ in range(2)]
        await asyncio.sleep(0.5)
        for folder in _ours():  # while both run: the server's folder, two run cgroups in it
            if folder not in before:
                seen[folder] = sorted(c.name for c in folder.iterdir() if c.is_dir())
        return await asyncio.gather(*runs)

    results = asyncio.run(two_runs())
    assert [r.stdout for r in results] == ["ok\n", "ok\n"]
    _, roots = cgroups._hierarchies()
    assert list(seen.values()) == [["run-0", "run-1"]] * len(roots)  # one per hierarchy
    assert _ours() == before  # both runs over: nothing of this runner is left


def test_a_starting_server_removes_dead_servers_and_empty_old_cgroups(setup):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, timeout=60, check=True)
    dead_pid = int(dead.stdout)
    _, roots = cgroups._hierarchies()
    old = time.time() - 2 * STALE_CGROUP_S
    made = {}
    for root in roots:
        made[root] = {"stale": root / f"{cgroups.PREFIX}{os.getpid()}-stale",  # live pid, old
                      "fresh": root / f"{cgroups.PREFIX}{os.getpid()}-fresh",  # live pid, new
                      "crashed": root / f"{cgroups.PREFIX}{dead_pid}-crashed"}  # dead pid
        for folder in (*made[root].values(), made[root]["crashed"] / "run-0"):
            folder.mkdir()
        os.utime(made[root]["stale"], (old, old))
    try:
        assert cgroups.remove_stale() >= 2 * len(roots)
        assert [sorted(name for name, p in folders.items() if p.exists())
                for folders in made.values()] == [["fresh"]] * len(roots)
    finally:
        for folders in made.values():
            for folder in (folders["crashed"] / "run-0", *folders.values()):
                if folder.exists():
                    folder.rmdir()
