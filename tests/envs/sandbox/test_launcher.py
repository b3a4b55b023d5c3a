"""launcher.py run directly: its status protocol, and the cage a non-root server gets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from envs.sandbox.spec import LAUNCHER, read_status

FACTS = """
import json, os, socket
print(json.dumps({"uid": os.getuid(), "pid": os.getpid(),
                  "interfaces": [n for _, n in socket.if_nameindex()],
                  "tmp": os.listdir("/tmp"), "cwd": os.getcwd()}))
"""


def _launch(workdir: Path, python: str, namespaces: dict, code: str, launcher_python=None,
            prefix=()) -> tuple[subprocess.CompletedProcess, list[dict]]:  # fmt: skip
    (workdir / "main.py").write_text(code)
    status_r, status_w = os.pipe()
    spec = {
        "workdir": str(workdir),
        "argv": [python, "-u", "main.py"],
        "env": {"PATH": "/usr/bin:/bin", "HOME": str(workdir)},
        "uid": None,
        "gid": None,
        "rlimits": {"RLIMIT_CORE": [0, 0]},
        "namespaces": namespaces,
        "tmpfs_size_mb": 8,
        "status_fd": status_w,
    }
    argv = [*prefix, launcher_python or sys.executable, "-I", str(LAUNCHER), json.dumps(spec)]
    try:
        proc = subprocess.run(
            argv, capture_output=True, pass_fds=(status_w,), timeout=20, stdin=subprocess.DEVNULL
        )
    finally:
        os.close(status_w)
    try:
        return proc, read_status(status_r)
    finally:
        os.close(status_r)


NO_NAMESPACES = {"net": False, "pid": False, "mount": False}


def test_reports_the_exit_code(tmp_path):
    proc, events = _launch(
        tmp_path, sys.executable, NO_NAMESPACES, "print('hi')\nraise SystemExit(3)"
    )
    assert proc.returncode == 0
    assert proc.stdout == b"hi\n"
    assert events == [{"event": "exit", "return_code": 3}]


def test_reports_a_signal(tmp_path):
    code = "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)"
    _, events = _launch(tmp_path, sys.executable, NO_NAMESPACES, code)
    assert events == [{"event": "exit", "signal": 15}]


def test_reports_a_setup_error(tmp_path):
    _, events = _launch(tmp_path, "/nonexistent/python", NO_NAMESPACES, "print(1)")
    assert events[0]["event"] == "error"
    assert events[0]["message"].startswith("starting the user code failed: [Errno 2]")
    assert events[1] == {"event": "exit", "return_code": 127}


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
    reason="needs root to start the launcher as an unprivileged user (setpriv, /usr/bin/python3)",
)
def _others_can_read(path: Path) -> bool:
    """Whether a user that owns nothing on the way (uid 65534) can read `path`: every
    folder above it searchable by others, the file readable by them."""
    folders_ok = all(os.stat(p).st_mode & 0o001 for p in path.resolve().parents)
    return folders_ok and bool(os.stat(path).st_mode & 0o004)


def test_non_root_server_gets_namespaces_from_a_user_namespace():
    if not _others_can_read(LAUNCHER):  # a checkout under root's home (mode 0700), say
        pytest.skip(f"uid 65534 cannot read the launcher in this checkout ({LAUNCHER}): "
                    "clone it where other users can read it to run this test")
    # Not under pytest's tmp_path: that is private to root (0700), like /root.
    workdir = Path(tempfile.mkdtemp(prefix="agentrl-launcher-test-"))
    try:
        os.chown(workdir, 65534, 65534)
        nobody = ("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups")
        namespaces = {"net": True, "pid": True, "mount": True, "user": True}
        proc, events = _launch(
            workdir, "/usr/bin/python3", namespaces, FACTS, "/usr/bin/python3", prefix=nobody
        )
    finally:
        shutil.rmtree(workdir)
    errors = [e for e in events if e["event"] == "error"]
    if errors and "unshare(user namespace)" in errors[0]["message"]:
        pytest.skip(f"unprivileged user namespaces are disabled here: {errors[0]['message']}")
    assert events[-1] == {"event": "exit", "return_code": 0}, (events, proc.stderr)
    facts = json.loads(proc.stdout)
    assert facts == {
        "uid": 65534,
        "pid": 2,
        "interfaces": ["lo"],
        "tmp": [workdir.name],
        "cwd": str(workdir),
    }
