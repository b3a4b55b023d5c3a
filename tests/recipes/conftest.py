"""Helpers for the tests of the GPU recipe scripts (recipes/*/run_gpu.sh), which run each
script with a stub trainer and its real service: a free port, whether a process still runs,
the pids a script reports, interrupting a script once training has started, and checking
that nothing the script started is left.

The helpers reach the tests through the `scripts` fixture (tests are not a package)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped counts as stopped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def pid_in(stderr: str, what: str) -> int:
    """The pid the script reported for ``what`` ("sandbox pid 123")."""
    match = re.search(rf"{what} pid (\d+)", stderr)
    assert match, stderr
    return int(match.group(1))


def interrupt_when_training(
    cmd: list[str],
    env: dict[str, str],
    started: Path,
    sig: signal.Signals = signal.SIGINT,
    start_timeout: float = 60,
) -> tuple[int, str]:
    """Run the script command ``cmd``, wait up to ``start_timeout`` seconds for the stub
    trainer to create ``started``, send the script ``sig``; its exit status and stderr.

    The script starts with SIGINT at its default action, as from a terminal: a test run
    started in the background (``cmd &`` in a non-interactive shell) ignores SIGINT, every
    child inherits that, and bash cannot trap a signal ignored when it started, so the
    script would never see the Ctrl-C."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # reset by exec
    try:
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    finally:
        if previous is not None:  # None: a handler not set from Python, left as it was
            signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + start_timeout
    while not started.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "training did not start"
        time.sleep(0.2)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr


def assert_nothing_left(stderr: str, service: str, stub_dir: Path, port: int | None = None) -> None:
    """The service the script reported in ``stderr`` is stopped, and so are the stub
    trainer and the child it leaves, where they wrote their pids (``stub_dir/pid``,
    ``stub_dir/child``); with ``port``, that port is free again."""
    assert not alive(pid_in(stderr, service)), stderr
    for name in ("pid", "child"):
        if (stub_dir / name).exists():
            assert not alive(int((stub_dir / name).read_text())), name
    if port is not None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


@pytest.fixture
def scripts() -> SimpleNamespace:
    """The helpers of this file."""
    return SimpleNamespace(
        free_port=free_port,
        alive=alive,
        pid_in=pid_in,
        interrupt_when_training=interrupt_when_training,
        assert_nothing_left=assert_nothing_left,
    )
