"""The bubblewrap cage of the harness agents, with plain shell commands: an allow-listed
root (no home, no /srv, no project checkout, no other episode; Python and node still run),
only the writable folder takes writes, /tmp is private, no network, a missing ``ro_binds``
path is named, the file-size rlimit holds, and a command that daemonizes is killed with its
whole tree at the budget."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from agentrl.agents.sandbox import (
    SANDBOX_PATH,
    SandboxSpec,
    install_folder,
    run_caged,
    same_place,
    sandbox_argv,
)

MARK = "317.25"  # a sleep length no other process uses


def _run(spec: SandboxSpec, script: str, timeout: float = 20):
    argv = sandbox_argv(spec, ["/bin/sh", "-c", script])
    env = {"PATH": SANDBOX_PATH, "HOME": str(spec.workdir)}
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
    return SandboxSpec(kind="bwrap" if bwrap else "none", writable=same_place(tmp_path),
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
    assert lines[0] == "ro-refused" and lines[-2:] == ["etc-refused", "no-network"]
    assert set(lines[1:-2]) == {p.relative_to("/tmp").parts[0] for p in (tmp_path, outside)}
    assert (tmp_path / "work" / "inside.txt").read_text() == "in\n"
    assert not (outside / "x").exists() and not Path("/etc/agentrl-probe").exists()


@pytest.fixture
def secrets(tmp_path):
    """Files the cage must not show: in the invoking user's home, under /srv, in another
    episode's folder beside this one; yielded as paths, removed afterwards."""
    made = []
    fd, home_secret = tempfile.mkstemp(prefix=".agentrl-secret-", dir=Path.home())
    os.close(fd)
    made.append(Path(home_secret))
    srv = Path("/srv")
    if srv.is_dir() and os.access(srv, os.W_OK):
        made.append(Path(tempfile.mkdtemp(prefix="agentrl-secret-", dir=srv)) / "key")
    other = tmp_path.parent / f"{tmp_path.name}-other-episode"
    other.mkdir()
    made.append(other / "answer")
    for path in made:
        path.write_text("SECRET\n")
    yield made
    made[0].unlink()
    for path in made[1:]:
        shutil.rmtree(path.parent)


def test_the_root_is_an_allow_list(tmp_path, bwrap, secrets):
    checkout = Path(__file__).resolve().parents[2]  # the project: its tests, its data
    targets = [*secrets, Path(__file__).resolve(), checkout / "pyproject.toml", Path.home()]
    reads = "; ".join(f"cat {t} 2>/dev/null || ls {t} 2>/dev/null || echo hidden" for t in targets)
    node = "node -e 'console.log(1 + 1)'" if shutil.which("node") else "echo 2"
    result = _run(_spec(tmp_path, bwrap), f"{reads}; ls /; python3 -c 'print(6 * 7)'; {node};"
                                          " echo ok > done.txt; test -r /etc/shadow || echo no-shadow")
    assert result.returncode == 0, result.stderr
    assert "SECRET" not in result.stdout
    lines = result.stdout.split()
    assert lines[:len(targets)] == ["hidden"] * len(targets)
    shown = lines[len(targets):-3]
    assert set(shown) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc",
                          "sbin", "tmp", "usr", "var"}, shown
    assert lines[-3:] == ["42", "2", "no-shadow"]
    assert (tmp_path / "work" / "done.txt").read_text() == "ok\n"


def test_ro_binds_show_more(tmp_path, bwrap):
    data = tmp_path.parent / f"{tmp_path.name}-data"
    data.mkdir()
    (data / "corpus.txt").write_text("words\n")
    result = _run(_spec(tmp_path, bwrap, ro_binds=(str(data),)), f"cat {data}/corpus.txt")
    assert result.stdout == "words\n"


def test_a_missing_ro_bind_is_named(tmp_path):
    missing = str(tmp_path / "no-such-folder")
    spec = SandboxSpec(kind="bwrap", workdir=tmp_path, bwrap="bwrap", ro_binds=(missing,))
    with pytest.raises(FileNotFoundError, match=f"ro_binds: '{missing}' does not exist"):
        sandbox_argv(spec, ["true"])


def test_install_folders_are_no_wider_than_the_program_needs(tmp_path, monkeypatch):
    npm = tmp_path / "clis" / "node_modules"
    entry = npm / "@openai" / "codex" / "bin" / "codex.js"
    entry.parent.mkdir(parents=True)
    entry.write_text("")
    (npm / ".bin").mkdir()
    (npm / ".bin" / "codex").symlink_to(entry)
    assert install_folder(npm / ".bin" / "codex") == npm.resolve()
    prefix = tmp_path / "pyenv" / "3.11"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "bin").mkdir()
    (prefix / "bin" / "python3").write_text("")
    assert install_folder(prefix / "bin" / "python3") == prefix.resolve()
    lone = tmp_path / "tools" / "bin" / "claude"  # no lib beside bin: the file alone
    lone.parent.mkdir(parents=True)
    lone.write_text("")
    assert install_folder(lone) == lone.resolve()
    monkeypatch.setenv("HOME", str(tmp_path / "tools"))
    (tmp_path / "tools" / "lib").mkdir()
    with pytest.raises(ValueError, match="would show all of .*tools"):
        install_folder(lone)


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
    spec = SandboxSpec(kind="docker", workdir=Path("/tmp"))
    with pytest.raises(ValueError, match="bwrap"):
        sandbox_argv(spec, ["true"])
    with pytest.raises(FileNotFoundError, match="apt-get install bubblewrap"):
        sandbox_argv(SandboxSpec(kind="bwrap", workdir=Path("/tmp")), ["true"])


def test_a_program_kept_visible_under_tmp_still_runs(tmp_path, bwrap):
    """A clone in /tmp (its agent CLIs): /tmp is a fresh tmpfs in the cage, so an install
    folder there is bound back, read-only."""
    import tempfile

    tool_dir = Path(tempfile.mkdtemp(prefix="agentrl-visible-", dir="/tmp"))
    tool = tool_dir / "bin" / "hello"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho visible-ok\n")
    tool.chmod(0o755)
    spec = _spec(tmp_path, bwrap, visible=(str(tool_dir),))
    result = _run(spec, f"{tool}; touch {tool_dir}/written 2>/dev/null || echo read-only")
    assert "visible-ok" in result.stdout
    if bwrap:
        assert "read-only" in result.stdout and not (tool_dir / "written").exists()
