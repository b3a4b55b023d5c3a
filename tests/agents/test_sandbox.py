"""The bubblewrap cage of the harness agents, with plain shell commands: only the writable
folder takes writes, /tmp is private, no network, the file-size rlimit holds, and a command
that daemonizes is killed with its whole tree at the budget."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agentrl.agents.sandbox import SandboxSpec, run_caged, sandbox_argv

MARK = "317.25"  # a sleep length no other process uses


def _run(spec: SandboxSpec, script: str, timeout: float = 20):
    argv = sandbox_argv(spec, ["/bin/sh", "-c", script])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(spec.writable)}
    return asyncio.run(run_caged(argv, env, spec, timeout))


def _sleepers() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if MARK.encode() in cmdline and b"sleep" in cmdline:
            found.append(int(pid))
    return found


def _spec(tmp_path: Path, bwrap: str | None, **kw) -> SandboxSpec:
    (tmp_path / "work").mkdir(exist_ok=True)
    return SandboxSpec(kind="bwrap" if bwrap else "none", writable=tmp_path,
                       workdir=tmp_path / "work", bwrap=bwrap, **kw)


def test_only_the_writable_folder_takes_writes_and_there_is_no_network(tmp_path, bwrap):
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    spec = _spec(tmp_path, bwrap, ro_binds=(str(outside),))
    result = _run(spec, f"echo in > inside.txt; touch {outside}/x || echo ro-refused; "
                        "ls /tmp; touch /etc/agentrl-probe || echo etc-refused; "
                        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), 2)\""
                        " || echo no-network")
    assert result.returncode == 0 and result.stopped == "exit"
    lines = result.stdout.split()
    # /tmp is a private tmpfs: only the mount points of the bound folders are in it
    assert lines == ["ro-refused", tmp_path.relative_to("/tmp").parts[0], "etc-refused",
                     "no-network"]
    assert (tmp_path / "work" / "inside.txt").read_text() == "in\n"
    assert not (outside / "x").exists() and not Path("/etc/agentrl-probe").exists()


def test_the_file_size_limit_holds(tmp_path, bwrap):
    result = _run(_spec(tmp_path, bwrap, file_size_mb=1),
                  "head -c 3000000 /dev/zero > big || echo too-big")
    assert "too-big" in result.stdout
    assert (tmp_path / "work" / "big").stat().st_size == 1 << 20


def test_a_daemonized_tree_is_killed_at_the_budget(tmp_path, bwrap):
    result = _run(_spec(tmp_path, bwrap),
                  f"setsid sleep {MARK} & sleep {MARK} & echo started; wait", timeout=1.5)
    assert result.stopped == "timeout" and result.returncode is None
    assert result.stdout == "started\n"
    assert _sleepers() == []


def test_without_a_cage_the_group_is_still_killed(tmp_path):
    result = _run(_spec(tmp_path, None), f"sleep {MARK} & echo started; wait", timeout=1)
    assert result.stopped == "timeout" and _sleepers() == []


def test_bad_kinds_are_named():
    spec = SandboxSpec(kind="docker", writable=Path("/tmp"), workdir=Path("/tmp"))
    with pytest.raises(ValueError, match="bwrap"):
        sandbox_argv(spec, ["true"])
    with pytest.raises(FileNotFoundError, match="apt-get install bubblewrap"):
        sandbox_argv(SandboxSpec(kind="bwrap", writable=Path("/tmp"), workdir=Path("/tmp")),
                     ["true"])


def test_a_program_kept_visible_under_tmp_still_runs(tmp_path, bwrap):
    """A clone in /tmp (its venv, its agent CLIs): /tmp is a fresh tmpfs in the cage, so what
    must stay readable there is bound back, read-only."""
    import tempfile

    tool_dir = Path(tempfile.mkdtemp(prefix="agentrl-visible-", dir="/tmp"))
    tool = tool_dir / "bin" / "hello"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho visible-ok\n")
    tool.chmod(0o755)
    spec = _spec(tmp_path, bwrap, keep_visible=(str(tool),))
    result = _run(spec, f"{tool}; touch {tool_dir}/written 2>/dev/null || echo read-only")
    assert "visible-ok" in result.stdout
    if bwrap:
        assert "read-only" in result.stdout and not (tool_dir / "written").exists()
