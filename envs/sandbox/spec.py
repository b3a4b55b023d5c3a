"""What one sandbox run is made of: the launcher's spec, the user's environment and limits.

Shared by the runner (``runner.py``) and the start-up probe (``isolation.py``). The spec is
the JSON ``launcher.py`` reads; ``Isolation`` is what the probe found the machine allows.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envs.sandbox.config import SandboxConfig

logger = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("launcher.py")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
LAUNCHER_ENV = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}  # the server's own is not passed on
CODE_FILE = "main.py"
READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class Isolation:
    """What the machine allowed at start-up (``probe_isolation``); every response shows it."""

    network: bool  # a network namespace with only a loopback device of its own
    pid_namespace: bool  # the run sees only its own processes; all die with it
    mount_namespace: bool  # private tmpfs /tmp, /var/tmp, /dev/shm, /run/lock and workdir
    private_proc: bool  # /proc shows only the run's processes
    unprivileged_user: bool  # user code does not run as root
    separate_user: bool  # ... nor as the server's user: a per-run uid (server is root)
    user_namespace: bool  # namespaces come from an unprivileged user namespace
    python: str  # interpreter that runs the user code
    notes: tuple[str, ...] = ()  # why something is unavailable
    ipc_namespace: bool = False  # SysV IPC (shared memory, semaphores) of the run's own
    read_only_host: bool = False  # every host mount is read-only inside the run
    seccomp: bool = False  # the syscall filter is loaded before the user code starts
    cgroup: str | None = None  # "v1" | "v2": memory and pids limits cover the whole run

    def namespaces(self) -> dict[str, bool]:
        return {
            "net": self.network,
            "pid": self.pid_namespace,
            "mount": self.mount_namespace,
            "ipc": self.ipc_namespace,
            "user": self.user_namespace,
        }

    def as_dict(self) -> dict[str, bool]:
        return {
            "network": self.network,
            "pid_namespace": self.pid_namespace,
            "mount_namespace": self.mount_namespace,
            "private_proc": self.private_proc,
            "unprivileged_user": self.unprivileged_user,
            "separate_user": self.separate_user,
            "ipc_namespace": self.ipc_namespace,
            "read_only_host": self.read_only_host,
            "seccomp": self.seccomp,
            "cgroup": self.cgroup is not None,
        }


def user_env(workdir: str) -> dict[str, str]:
    """The whole environment of user code: nothing of the server's is passed on.

    One thread per numeric library, because RLIMIT_NPROC counts threads too.
    """
    return {
        "PATH": SANDBOX_PATH,
        "LANG": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": "/tmp",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def rlimits(config: SandboxConfig, run_timeout: float, memory_limit_mb: int) -> dict:
    cpu = math.ceil(run_timeout + config.cpu_time_slack)
    mib = 1 << 20
    return {
        "RLIMIT_CPU": [cpu, cpu + 1],  # SIGXCPU at the soft limit, SIGKILL one second later
        "RLIMIT_AS": [memory_limit_mb * mib] * 2,
        "RLIMIT_FSIZE": [config.max_file_size_mb * mib] * 2,
        "RLIMIT_NPROC": [config.max_processes] * 2,
        "RLIMIT_NOFILE": [config.max_open_files] * 2,
        "RLIMIT_CORE": [0, 0],
    }


def build_spec(
    config: SandboxConfig,
    namespaces: dict[str, bool],
    python: str,
    workdir: str,
    uid: int | None,
    run_timeout: float,
    memory_limit_mb: int,
    status_fd: int,
    *,
    seccomp: bool = False,
    server_pid: int | None = None,
    cgroup_procs: tuple[str, ...] = (),
) -> dict:
    """The JSON the launcher reads (see launcher.py)."""
    return {
        "workdir": workdir,
        "argv": [python, "-u", CODE_FILE],
        "env": user_env(workdir),
        "uid": uid,
        "gid": uid,
        "rlimits": rlimits(config, run_timeout, memory_limit_mb),
        "namespaces": namespaces,
        "tmpfs_size_mb": config.tmpfs_size_mb,
        "status_fd": status_fd,
        "seccomp": seccomp,
        "server_pid": server_pid,  # the launcher dies with this process
        "cgroup_procs": list(cgroup_procs),  # cgroup.procs files the launcher joins first
    }


def launcher_argv(spec: dict) -> list[str]:
    # The launcher runs with the server's interpreter, isolated from PYTHON* variables.
    return [sys.executable, "-I", str(LAUNCHER), json.dumps(spec)]


STAGING_PREFIX = "agentrl-sandbox-"


def staging_root(config: SandboxConfig) -> str:
    return config.workdir_root or tempfile.gettempdir()


def stage_workdir(config: SandboxConfig, code: str, files: dict[str, bytes]) -> str:
    """A fresh directory holding main.py and the request's files; its name carries the
    server's pid (``agentrl-sandbox-<pid>-...``), so a restarted server can tell a dead
    predecessor's leftovers from a live server's runs."""
    workdir = tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-",
                               dir=staging_root(config))
    Path(workdir, CODE_FILE).write_text(code, encoding="utf-8")
    for name, data in files.items():
        Path(workdir, name).write_bytes(data)
    return workdir


def read_status(fd: int) -> list[dict]:
    """Every status line the launcher wrote (non-blocking; the writers have exited)."""
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    events = []
    for line in data.decode(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            logger.warning("sandbox launcher wrote an unreadable status line: %r", line)
    return events
