"""The cage a harness agent's CLI and every command it runs live in: bubblewrap.

    argv = sandbox_argv(spec, ["python3", "bridge.py", ...])   # bwrap ... -- python3 ...
    result = await run_caged(argv, env, spec, timeout_s)        # killed with its tree at the budget

What ``kind="bwrap"`` gives (the flags are in ``sandbox_argv``; docs/agents.md has the table):

- files: the host's root file system read-only (``--ro-bind / /``), a fresh ``/dev``,
  ``/proc`` and a private tmpfs on ``/tmp`` (``/var/tmp``, ``/dev/shm`` too); the episode's
  folder (workspace, the CLI's home, the gateway socket) is the only writable host path;
  the invoking user's home is hidden by a tmpfs unless the CLI or Python live under it;
- network: a network namespace of its own with only a loopback (``--unshare-net``): the
  gateway is reached through a unix socket bound into the episode folder, nothing else;
- processes: pid, IPC and UTS namespaces of their own, every capability dropped (root
  inside cannot remount or mount), a new session, ``--die-with-parent``; the whole tree is
  SIGKILLed at the budget (its process group; the pid namespace takes the rest with it);
- limits (rlimits set before bwrap starts, inherited by everything inside): core dumps
  off, CPU seconds per process, file size, open files, and address space when
  ``memory_mb`` is set (off by default: node and the Rust CLIs reserve many GB of address
  space they never touch).

``kind="none"`` runs the same command without the cage (the same limits and kill): only
for trusted tasks on a machine that does not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

SANDBOX_KINDS = ("bwrap", "none")
BWRAP_ENV = "AGENTRL_BWRAP"
INSTALL_BWRAP = "apt-get install bubblewrap (or set AGENTRL_BWRAP to a bwrap binary)"
OUTPUT_CAP = 1 << 20  # bytes of the CLI's stdout / stderr kept


@dataclass(frozen=True)
class SandboxSpec:
    """What one caged run may touch and use."""

    kind: str                    # bwrap | none
    writable: Path               # the episode folder: the only writable host path
    workdir: Path                # where the command starts (the workspace)
    bwrap: str | None = None     # the bwrap binary (kind=bwrap)
    keep_visible: tuple[str, ...] = ()  # paths that must stay readable (CLI, Python)
    ro_binds: tuple[str, ...] = ()      # extra host paths shown read-only at the same place
    cpu_s: int = 600             # RLIMIT_CPU, CPU seconds per process
    file_size_mb: int = 256      # RLIMIT_FSIZE
    open_files: int = 4096       # RLIMIT_NOFILE
    memory_mb: int | None = None  # RLIMIT_AS per process; None: not limited


def find_bwrap() -> str | None:
    """The bwrap binary: ``$AGENTRL_BWRAP``, else ``bwrap`` on PATH, else None."""
    named = os.environ.get(BWRAP_ENV)
    if named:
        return named if Path(named).is_file() else None
    return shutil.which("bwrap")


def _hidden_home(spec: SandboxSpec) -> list[str]:
    home = Path(os.path.expanduser("~")).resolve()
    if home == Path("/"):
        return []
    needed = [Path(p).resolve() for p in (*spec.keep_visible, spec.writable, *spec.ro_binds)]
    if any(home == p or home in p.parents for p in needed):
        return []
    return ["--tmpfs", str(home)]


MASKED = ("/tmp", "/var/tmp", "/dev/shm")  # a fresh tmpfs in the sandbox


def _unmasked(spec: SandboxSpec, hidden: list[str]) -> list[str]:
    """``--ro-bind`` of what must stay readable but lies under a masked folder (a clone in
    /tmp with its venv and agent CLIs, say): the masked folder's child that holds it."""
    masks = [Path(m) for m in (*MASKED, *hidden[1:2])]
    binds: list[str] = []
    for path in spec.keep_visible:
        real = Path(path).resolve()
        for mask in masks:
            if mask in real.parents:
                top = str(mask / real.relative_to(mask).parts[0])
                if top not in binds:
                    binds.append(top)
    return [arg for top in binds for arg in ("--ro-bind", top, top)]


def sandbox_argv(spec: SandboxSpec, command: list[str]) -> list[str]:
    """``command`` wrapped in the cage of ``spec`` (unchanged for kind ``none``)."""
    if spec.kind == "none":
        return list(command)
    if spec.kind != "bwrap":
        raise ValueError(f"sandbox must be one of {SANDBOX_KINDS}, got {spec.kind!r}")
    if not spec.bwrap:
        raise FileNotFoundError(f"the agent sandbox needs bubblewrap: {INSTALL_BWRAP}")
    hidden = _hidden_home(spec)
    argv = [spec.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            *(arg for mask in MASKED for arg in ("--tmpfs", mask)), *hidden,
            *_unmasked(spec, hidden)]
    for path in spec.ro_binds:
        argv += ["--ro-bind", path, path]
    argv += ["--bind", str(spec.writable), str(spec.writable),
             "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
             "--cap-drop", "ALL", "--new-session", "--die-with-parent",
             "--chdir", str(spec.workdir), "--"]
    return argv + list(command)


def _limits(spec: SandboxSpec):
    """The rlimits of ``spec``, set in the child before it execs (inherited by the tree)."""
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_CPU, spec.cpu_s),
              (resource.RLIMIT_FSIZE, spec.file_size_mb << 20),
              (resource.RLIMIT_NOFILE, spec.open_files)]
    if spec.memory_mb:
        limits.append((resource.RLIMIT_AS, spec.memory_mb << 20))

    def apply() -> None:
        for which, value in limits:
            resource.setrlimit(which, (value, value))
    return apply


@dataclass
class CagedResult:
    """How a caged run ended."""

    returncode: int | None  # None: killed at the budget
    stdout: str
    stderr: str
    stopped: str            # exit | timeout | turns


def kill_tree(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the run's process group (bwrap and, with it, its pid namespace)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def run_caged(argv: list[str], env: dict[str, str], spec: SandboxSpec,
                    timeout_s: float, stop: asyncio.Event | None = None) -> CagedResult:
    """Run ``argv`` (already caged) in a session of its own; kill its whole tree after
    ``timeout_s`` seconds, when ``stop`` is set (a turn budget), or when cancelled."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=spec.workdir, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True, preexec_fn=_limits(spec),
    )  # fmt: skip
    output = asyncio.ensure_future(_read_both(proc))
    stopper = asyncio.ensure_future(stop.wait() if stop is not None else asyncio.Event().wait())
    stopped = "exit"
    try:
        done, _ = await asyncio.wait({output, stopper}, timeout=timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if output not in done or (stop is not None and stop.is_set()):
            stopped = "turns" if stop is not None and stop.is_set() else "timeout"
            kill_tree(proc)
        out, err = await output
        await proc.wait()
    finally:
        stopper.cancel()
        if proc.returncode is None:  # cancelled: leave nothing running
            kill_tree(proc)
            output.cancel()
    if stopped == "exit":
        kill_tree(proc)  # anything the command left behind in its group
    return CagedResult(None if stopped != "exit" else proc.returncode, out, err, stopped)


async def _read_both(proc: asyncio.subprocess.Process) -> tuple[str, str]:
    async def read(stream: asyncio.StreamReader) -> str:
        kept = bytearray()
        while chunk := await stream.read(65536):
            kept += chunk[: max(0, OUTPUT_CAP - len(kept))]
        return kept.decode("utf-8", "replace")
    return await asyncio.gather(read(proc.stdout), read(proc.stderr))


__all__ = ["BWRAP_ENV", "INSTALL_BWRAP", "SANDBOX_KINDS", "CagedResult", "SandboxSpec",
           "find_bwrap", "kill_tree", "run_caged", "sandbox_argv"]
