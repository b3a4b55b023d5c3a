"""Find out, once at start-up, which isolation this machine allows the sandbox.

Each wanted mechanism (network, pid, mount and IPC namespaces, a read-only view of the
host's file systems, the seccomp filter; a per-run uid when the server is root, an
unprivileged user namespace when it is not) is tried with a real run of a small probe
program through ``launcher.py``; per-run cgroups are checked by creating one. What the kernel refuses is switched off, with the
reason in ``Isolation.notes``; ``GET /health`` and every ``/run_code`` response show the
result. The interpreter for user code is chosen here too: the server's own when the sandbox
user can run it (a root server's Python may live under /root, which a dropped uid cannot
enter), else ``python3`` on the sandbox PATH.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

from envs.sandbox.cgroups import detect_cgroups
from envs.sandbox.config import SandboxConfig
from envs.sandbox.spec import (
    LAUNCHER_ENV,
    SANDBOX_PATH,
    Isolation,
    build_spec,
    launcher_argv,
    read_status,
    stage_workdir,
)

logger = logging.getLogger(__name__)

PROBE_CODE = """
import ctypes, json, os, socket
print(json.dumps({
    "uid": os.getuid(),
    "pid": os.getpid(),
    "interfaces": sorted(name for _, name in socket.if_nameindex()),
    "foreign_tmp": [n for n in os.listdir("/tmp") if n != os.path.basename(os.getcwd())],
    "unshare_denied": ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0,
}))
"""
PROBE_TIMEOUT = 20.0


class IsolationUnavailableError(RuntimeError):
    """``require_isolation`` is set and the machine does not allow it."""


def _probe(config: SandboxConfig, namespaces: dict, python: str, uid: int | None,
           seccomp: bool = False):
    """One probe run; returns ``(facts, setup_events, error)``."""
    workdir = stage_workdir(config, PROBE_CODE, {})
    status_r, status_w = os.pipe()
    spec = build_spec(config, namespaces, python, workdir, uid, PROBE_TIMEOUT, 256, status_w,
                      seccomp=seccomp)
    spec["rlimits"].pop("RLIMIT_AS")  # the probe must not fail for a small address space
    try:
        proc = subprocess.run(
            launcher_argv(spec),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            pass_fds=(status_w,),
            start_new_session=True,
            env=LAUNCHER_ENV,
            timeout=PROBE_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return None, [], f"the probe did not finish within {PROBE_TIMEOUT:g} s"
    finally:
        os.close(status_w)
        shutil.rmtree(workdir, ignore_errors=True)
    try:
        events = read_status(status_r)
    finally:
        os.close(status_r)
    errors = [e["message"] for e in events if e.get("event") == "error"]
    if errors:
        return None, events, "; ".join(errors)
    exits = [e for e in events if e.get("event") == "exit"]
    if not exits or exits[-1].get("return_code") != 0:
        stderr = proc.stderr.decode(errors="replace").strip()[-500:]
        return None, events, f"probe program failed ({exits[-1:]}): {stderr}"
    return json.loads(proc.stdout.decode().strip().splitlines()[-1]), events, None


def _python_candidates(config: SandboxConfig) -> list[str]:
    if config.python_executable:
        return [config.python_executable]
    found = shutil.which("python3", path=SANDBOX_PATH)
    return [c for c in (sys.executable, found) if c]


def _choose_python(config: SandboxConfig, uid: int | None) -> str:
    no_namespaces = {"net": False, "pid": False, "mount": False, "ipc": False, "user": False}
    failures = []
    for python in _python_candidates(config):
        facts, _, error = _probe(config, no_namespaces, python, uid)
        if facts is not None:
            return python
        failures.append(f"{python}: {error}")
        logger.info("sandbox: interpreter %s unusable by the sandbox user: %s", python, error)
    raise RuntimeError("the sandbox cannot run any Python interpreter: " + "; ".join(failures))


def _choose_namespaces(config, python, uid, root, notes) -> tuple[dict, dict | None, list]:
    wanted = {
        "net": config.network_namespace,
        "pid": config.pid_namespace,
        "mount": config.mount_namespace,
        "ipc": config.ipc_namespace,
    }

    def with_user(ns: dict) -> dict:
        return {**ns, "user": not root and any(ns.values())}

    facts, events, error = _probe(config, with_user(wanted), python, uid)
    if facts is not None or not any(wanted.values()):
        return with_user(wanted), facts, events
    notes.append(f"all namespaces together failed: {error}")
    working = dict.fromkeys(wanted, False)
    for name, want in wanted.items():
        if want:
            single = with_user({**working, name: True})
            ok, _, single_error = _probe(config, single, python, uid)
            working[name] = ok is not None
            if ok is None:
                notes.append(f"{name} namespace unavailable: {single_error}")
    facts, events, error = _probe(config, with_user(working), python, uid)
    if facts is None:
        notes.append(f"namespaces {working} failed together, running without any: {error}")
        working = dict.fromkeys(wanted, False)
        facts, events, _ = _probe(config, with_user(working), python, uid)
    return with_user(working), facts, events


def probe_isolation(config: SandboxConfig) -> Isolation:
    """Probe the machine (a few short runs, well under a second) and return what works."""
    root = os.geteuid() == 0
    uid = config.uid_base if root else None
    notes: list[str] = []
    for name in ("network_namespace", "pid_namespace", "mount_namespace", "ipc_namespace",
                 "seccomp", "cgroup"):
        if not getattr(config, name):
            notes.append(f"{name} switched off by the config")
    if not root:
        notes.append("server is not root: user code runs as the server's own uid")
    python = _choose_python(config, uid)
    namespaces, facts, events = _choose_namespaces(config, python, uid, root, notes)
    if facts is None:
        raise RuntimeError("the sandbox cannot run Python code: " + "; ".join(notes))
    seccomp = False
    if config.seccomp:
        filtered, filtered_events, error = _probe(config, namespaces, python, uid, seccomp=True)
        seccomp = filtered is not None and filtered["unshare_denied"]
        if seccomp:
            facts, events = filtered, filtered_events
        else:
            notes.append(f"seccomp filter unavailable: {error or 'unshare was not denied'}")
    setup = {k: v for e in events if e.get("event") == "setup" for k, v in e.items()}
    private_proc = bool(setup.get("private_proc"))
    read_only_host = namespaces["mount"] and bool(setup.get("read_only_host"))
    if namespaces["mount"] and not read_only_host:
        notes.append("host file systems stay writable inside runs (no mount_setattr): "
                     f"{setup.get('reason', 'unknown')}")
    cgroup_version, cgroup_note = detect_cgroups(config, root)
    if cgroup_note:
        notes.append(cgroup_note)
    isolation = Isolation(
        network=namespaces["net"] and facts["interfaces"] == ["lo"],
        pid_namespace=namespaces["pid"] and facts["pid"] == 2,
        mount_namespace=namespaces["mount"] and not facts["foreign_tmp"],
        private_proc=namespaces["pid"] and namespaces["mount"] and private_proc,
        unprivileged_user=facts["uid"] != 0,
        separate_user=root and facts["uid"] == uid,
        user_namespace=namespaces["user"],
        python=python,
        notes=tuple(notes),
        ipc_namespace=namespaces["ipc"],
        read_only_host=read_only_host,
        seccomp=seccomp,
        cgroup=cgroup_version,
    )
    logger.info("sandbox isolation: %s python=%s", isolation.as_dict(), python)
    for note in notes:
        logger.warning("sandbox: %s", note)
    return isolation


def check_required(config: SandboxConfig, isolation: Isolation) -> None:
    """With ``require_isolation``, raise unless network, pids and user are all isolated."""
    if not config.require_isolation:
        return
    missing = [
        name
        for name in ("network", "pid_namespace", "unprivileged_user")
        if not getattr(isolation, name)
    ]
    if missing:
        raise IsolationUnavailableError(
            f"require_isolation is set but {', '.join(missing)} is unavailable here: "
            + "; ".join(isolation.notes)
        )
