"""The default cage a harness agent's CLI and every command it runs live in: bubblewrap.

    result = await BwrapSandbox(spec).run(["python3", "bridge.py", ...], env, timeout_s)
    # or, by hand: the argv and the run
    argv = sandbox_argv(spec, ["python3", "bridge.py", ...])   # bwrap ... -- python3 ...
    result = await run_caged(argv, env, spec, timeout_s)        # killed with its tree at the budget

``BwrapSandbox`` (``sandbox: bwrap``) and ``UncagedSandbox`` (``sandbox: none``) are the
``Sandbox`` interface's local kinds (cage.py).

What ``kind="bwrap"`` gives (the flags are in ``sandbox_argv``; docs/agents.md has the table):

- files: an allow-list. The root is an empty tmpfs (read-only once set up) into which only
  this is bound: the system's program and library folders (``SYSTEM_DIRS``) and the few
  /etc files programs need (``ETC_FILES``: no credentials), read-only; the install
  folders ``spec.visible`` (the CLI's, node's, Python's: ``install_folder``) and the
  task's ``ro_binds``, read-only, each checked to exist; ``spec.writable`` (the workspace,
  the CLI's home, the gateway socket) read-write; a fresh ``/dev`` and ``/proc``, private
  tmpfs on ``/tmp``, ``/var/tmp``, ``/dev/shm``. Nothing else of the host exists inside:
  no home, no project checkout, no data, no other episode;
- network: a network namespace of its own with only a loopback (``--unshare-net``): the
  gateway is reached through a unix socket bound into the episode folder, nothing else;
- processes: pid, IPC and UTS namespaces of their own, every capability dropped (root
  inside cannot remount or mount), a new session, ``--die-with-parent``; the whole tree is
  SIGKILLed at the budget (its process group; the pid namespace takes the rest with it);
- limits (rlimits set before bwrap starts, inherited by everything inside): core dumps
  off, CPU seconds per process, file size, open files, and address space when
  ``memory_mb`` is set (off by default: node and the Rust CLIs reserve many GB of address
  space they never touch); the whole episode's memory, tasks, CPU share and disk through
  a ``limits.Limiter`` (cgroups) passed to ``run_caged``: a tripped limit kills the run.

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
from dataclasses import replace
from pathlib import Path

from agentrl.agents.cage import SANDBOX_KINDS, CagedResult, Sandbox, SandboxSpec, same_place
from agentrl.agents.limits import Limiter, open_limiter

BWRAP_ENV = "AGENTRL_BWRAP"
INSTALL_BWRAP = "apt-get install bubblewrap (or set AGENTRL_BWRAP to a bwrap binary)"
OUTPUT_CAP = 1 << 20  # bytes of the CLI's stdout / stderr kept
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# what programs read of /etc: users and groups (no shadow), name resolution, the dynamic
# loader, the alternatives' links, time zone, OS name, CA certificates (not /etc/ssl/private)
ETC_FILES = ("/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts",
             "/etc/host.conf", "/etc/resolv.conf", "/etc/gai.conf", "/etc/services",
             "/etc/protocols", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
             "/etc/alternatives", "/etc/localtime", "/etc/timezone", "/etc/os-release",
             "/etc/mime.types", "/etc/ssl/certs", "/etc/ssl/openssl.cnf",
             "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki/tls/certs",
             "/etc/pki/ca-trust/extracted")
MASKED = ("/tmp", "/var/tmp", "/dev/shm")  # a fresh tmpfs in the sandbox
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def find_bwrap() -> str | None:
    """The bwrap binary: ``$AGENTRL_BWRAP``, else ``bwrap`` on PATH, else None."""
    named = os.environ.get(BWRAP_ENV)
    if named:
        return named if Path(named).is_file() else None
    return shutil.which("bwrap")


def in_system_dirs(path: str | Path) -> bool:
    """Whether ``path`` (symlinks resolved) is already shown by the system folders."""
    real = Path(path).resolve()
    return any(real == Path(d).resolve() or Path(d).resolve() in real.parents
               for d in SYSTEM_DIRS if Path(d).exists())


def install_folder(program: str | Path) -> Path:
    """What to show for ``program`` (symlinks resolved), no more than it needs to run: the
    ``node_modules`` folder an npm package lies in (its native parts are sibling packages),
    the prefix of a ``PREFIX/bin`` that has a ``PREFIX/lib`` (a Python or node install),
    else the file alone. Never the invoking user's home or ``/`` itself: that is an
    error naming the program."""
    real = Path(program).resolve()
    parts = real.parts
    if "node_modules" in parts[:-1]:
        last = len(parts) - 1 - parts[::-1].index("node_modules")
        folder = Path(*parts[: last + 1])
    elif real.parent.name == "bin" and (real.parent.parent / "lib").is_dir():
        folder = real.parent.parent
    else:
        folder = real
    home = Path(os.path.expanduser("~")).resolve()
    if folder == Path("/") or folder == home or folder in home.parents:
        raise ValueError(f"{program} would show all of {folder} to the agent sandbox: install "
                         "it in a folder of its own")
    return folder


def checked_binds(paths: tuple[str, ...]) -> list[str]:
    """``paths`` as they are; a ``FileNotFoundError`` names one that does not exist."""
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"ro_binds: {path!r} does not exist (a host path the task "
                                    "asked to see read-only in the agent sandbox)")
    return [str(p) for p in paths]


def _system_binds() -> list[str]:
    argv: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):  # merged /usr: /bin -> usr/bin
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in ETC_FILES:
        argv += ["--ro-bind-try", path, path]
    return argv


def sandbox_argv(spec: SandboxSpec, command: list[str]) -> list[str]:
    """``command`` wrapped in the cage of ``spec`` (unchanged for kind ``none``)."""
    if spec.kind == "none":
        return list(command)
    if spec.kind != "bwrap":
        raise ValueError(f"sandbox must be one of {SANDBOX_KINDS}, got {spec.kind!r}")
    if not spec.bwrap:
        raise FileNotFoundError(f"the agent sandbox needs bubblewrap: {INSTALL_BWRAP}")
    argv = [spec.bwrap, "--dev", "/dev", "--proc", "/proc",
            *(arg for mask in MASKED for arg in ("--tmpfs", mask)), *_system_binds()]
    for path in (*checked_binds(spec.visible), *checked_binds(spec.ro_binds)):
        argv += ["--ro-bind", path, path]
    for host, inside in spec.writable:
        argv += ["--bind", str(host), str(inside)]
    argv += ["--remount-ro", "/",
             "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
             "--cap-drop", "ALL", "--new-session", "--die-with-parent",
             "--chdir", str(spec.workdir), "--"]
    return argv + list(command)


def _preexec(spec: SandboxSpec, limiter: Limiter | None):
    """In the child before it execs: the rlimits of ``spec`` (inherited by the tree) and,
    with a limiter, the episode's cgroup."""
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_CPU, spec.cpu_s),
              (resource.RLIMIT_FSIZE, spec.file_size_mb << 20),
              (resource.RLIMIT_NOFILE, spec.open_files)]
    if spec.memory_mb:
        limits.append((resource.RLIMIT_AS, spec.memory_mb << 20))

    def apply() -> None:
        for which, value in limits:
            resource.setrlimit(which, (value, value))
        if limiter is not None:
            limiter.enter()
    return apply


def kill_tree(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the run's process group (bwrap and, with it, its pid namespace)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _watch(limiter: Limiter | None, every_s: float = 0.25) -> str:
    """The first limit that trips (never returns without a limiter)."""
    if limiter is None:
        await asyncio.Event().wait()
    while not (tripped := await asyncio.to_thread(limiter.tripped)):
        await asyncio.sleep(every_s)
    return tripped


async def run_caged(argv: list[str], env: dict[str, str], spec: SandboxSpec,
                    timeout_s: float, stop: asyncio.Event | None = None,
                    limiter: Limiter | None = None) -> CagedResult:
    """Run ``argv`` (already caged) in a session of its own, in ``limiter``'s cgroup; kill
    its whole tree after ``timeout_s`` seconds, when ``stop`` is set (a turn budget), when
    an episode limit trips, or when cancelled. With a limiter, every process of its cgroup
    is dead when this returns."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd="/" if spec.kind == "bwrap" else spec.workdir,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True,
        preexec_fn=_preexec(spec, limiter),
    )  # fmt: skip
    output = asyncio.ensure_future(_read_both(proc))
    stopper = asyncio.ensure_future(stop.wait() if stop is not None else asyncio.Event().wait())
    watcher = asyncio.ensure_future(_watch(limiter))
    stopped, limit = "exit", None
    try:
        done, _ = await asyncio.wait({output, stopper, watcher}, timeout=timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if watcher in done:
            stopped, limit = "limit", watcher.result()
        elif stop is not None and stop.is_set():
            stopped = "turns"
        elif output not in done:
            stopped = "timeout"
        if stopped != "exit":
            kill_tree(proc)
            if limiter is not None:
                await asyncio.to_thread(limiter.kill)
        out, err = await output
        await proc.wait()
    finally:
        stopper.cancel()
        watcher.cancel()
        if proc.returncode is None:  # cancelled: leave nothing running
            kill_tree(proc)
            output.cancel()
        if limiter is not None:
            await asyncio.shield(asyncio.to_thread(limiter.kill))
    if stopped == "exit":
        kill_tree(proc)  # anything the command left behind in its group
        if limiter is not None:  # a limit the kernel enforced as the run ended
            limit = await asyncio.to_thread(limiter.tripped)
    return CagedResult(None if stopped != "exit" else proc.returncode, out, err, stopped,
                       limit)


async def _read_both(proc: asyncio.subprocess.Process) -> tuple[str, str]:
    async def read(stream: asyncio.StreamReader) -> str:
        kept = bytearray()
        while chunk := await stream.read(65536):
            kept += chunk[: max(0, OUTPUT_CAP - len(kept))]
        return kept.decode("utf-8", "replace")
    return await asyncio.gather(read(proc.stdout), read(proc.stderr))


class BwrapSandbox(Sandbox):
    """``sandbox: bwrap``: each run a fresh bubblewrap cage (``sandbox_argv``) in a cgroup
    of its own (limits.py, ``spec.limits``), removed afterwards; the writable folders are
    bind mounts, so the interface's copies are nothing."""

    def __init__(self, spec: SandboxSpec) -> None:
        if spec.kind == "bwrap" and not spec.bwrap:
            found = find_bwrap()
            if found is None:
                raise FileNotFoundError(f"the agent sandbox needs bubblewrap: {INSTALL_BWRAP}; "
                                        "or AGENTRL_AGENT_SANDBOX=none to run without isolation")
            spec = replace(spec, bwrap=found)
        super().__init__(spec)

    async def run(self, command: list[str], env: dict[str, str], timeout_s: float,
                  stop: asyncio.Event | None = None) -> CagedResult:
        argv = sandbox_argv(self.spec, command)
        if self.spec.limits is None:
            return await run_caged(argv, env, self.spec, timeout_s, stop)
        limiter = await asyncio.to_thread(open_limiter, self.spec.limits, self.spec.name,
                                          list(self.spec.watched))
        try:
            return await run_caged(argv, env, self.spec, timeout_s, stop, limiter)
        finally:
            await asyncio.shield(asyncio.to_thread(limiter.close))


class UncagedSandbox(BwrapSandbox):
    """``sandbox: none``: the same runs, limits and kill without the cage (trusted tasks)."""

    isolated = False


__all__ = ["BWRAP_ENV", "ETC_FILES", "INSTALL_BWRAP", "SANDBOX_KINDS", "SANDBOX_PATH",
           "SYSTEM_DIRS", "BwrapSandbox", "CagedResult", "SandboxSpec", "UncagedSandbox",
           "checked_binds", "find_bwrap", "in_system_dirs", "install_folder", "kill_tree",
           "run_caged", "same_place", "sandbox_argv"]
