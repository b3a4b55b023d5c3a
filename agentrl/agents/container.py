"""``sandbox: container``: each run in an OCI container of its own, with podman.

    box = ContainerSandbox(spec)       # spec.image: AGENTRL_AGENT_IMAGE or extra_info.agent.image
    await box.start()                  # the image must be in podman's store: it is never pulled
    result = await box.run(command, env, timeout_s, stop)   # podman run ... IMAGE command
    await box.close()                  # podman rm -f: nothing of it left

The container sees its image's root (read-only), not the trainer's machine. Bound into
it at their host paths: read-only the install folders of ``spec.visible`` (the CLI's and
the interpreters' that lie outside the host's system folders, the bridge's Python) and
``spec.ro_binds``; read-write ``spec.writable`` (the workspace, the CLI's home, the
gateway's unix socket). What the host keeps under its system folders (``/usr``: Debian's
node or python3) is not bound: the image provides it. Isolation: ``--network=none`` (a
loopback only: the bridge reaches the gateway through the socket), every capability
dropped, ``no-new-privileges``, private ``/tmp``, pid, IPC and UTS namespaces, an init
that reaps. Limits: the whole run's memory (no swap), tasks and CPU share from
``spec.limits`` as podman's ``--memory``, ``--pids-limit``, ``--cpus`` (the container's
cgroup, which podman makes), watched through that cgroup (limits.py: an OOM kill or a
refused fork trips) with the disk watch on ``spec.watched``; per process ``--ulimit`` core
0, CPU seconds, file size, open files (no ``RLIMIT_AS``: podman has no such ulimit).

``AGENTRL_PODMAN`` names the podman binary (else ``podman`` on PATH);
``AGENTRL_PODMAN_RUNTIME`` its OCI runtime (``--runtime``; e.g. ``runc`` where crun refuses
a hybrid cgroup v1/v2 machine: "cgroups in hybrid mode not supported"). podman's default
``nofile``/``nproc`` ulimits are above what a root without ``CAP_SYS_RESOURCE`` may set, so
both are always given, each ulimit at most the trainer's own hard limit (a container
cannot raise it: runc fails "error setting rlimits ... operation not permitted").

Rootless podman (a trainer that is not root; ``podman info``: ``host.security.rootless``):
the container runs in a user namespace of its own (``--userns=keep-id``: its processes run
as the trainer's uid, so what they write in the workspace is the trainer's, and
``RLIMIT_NPROC`` counts this container's processes, not those of every container of the
user's). Its cgroup limits need controllers delegated to the user (cgroup v2:
``host.cgroupControllers``); on cgroup v1 podman ignores ``--memory``, ``--pids-limit`` and
``--cpus`` ("Resource limits are not supported and ignored on cgroups V1 rootless
systems"). Where a limit cannot be set it is not passed, a warning names it (once) and
what holds instead: the memory per process (``--ulimit data``: ``RLIMIT_DATA``, private
writable memory), the processes per container (``--ulimit nproc``), the CPU share not at
all; the disk watch and the time budget as everywhere (``agentrl doctor`` says it too).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import resource
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentrl.agents.cage import CagedResult, Sandbox, SandboxSpec
from agentrl.agents.limits import V1_CONTROLLERS, EpisodeLimits, Limiter, process_cgroups
from agentrl.agents.sandbox import checked_binds, run_caged

logger = logging.getLogger(__name__)

PODMAN_ENV = "AGENTRL_PODMAN"
RUNTIME_ENV = "AGENTRL_PODMAN_RUNTIME"
INSTALL_PODMAN = "apt-get install podman (or set AGENTRL_PODMAN to a podman binary)"
PODMAN_TIMEOUT_S = 60.0  # one podman command of ours (image exists, inspect, rm)
DEFAULT_NPROC = 4096     # RLIMIT_NPROC where the run has no pids limit
CONTROLLERS = V1_CONTROLLERS  # the cgroup controllers a container's limits use: the harness's
ULIMITS = {"core": resource.RLIMIT_CORE, "cpu": resource.RLIMIT_CPU,
           "fsize": resource.RLIMIT_FSIZE, "nofile": resource.RLIMIT_NOFILE,
           "nproc": resource.RLIMIT_NPROC, "data": resource.RLIMIT_DATA}
FALLBACK = {"memory": "episode_memory_mb holds per process only (--ulimit data)",
            "pids": "episode_pids holds as the container's RLIMIT_NPROC (--ulimit nproc)",
            "cpu": "episode_cpus does not hold"}


@dataclass(frozen=True)
class PodmanHost:
    """What podman can limit here: rootless or not, and the cgroup controllers its
    containers' limits get (all as root; rootless, those delegated to the user)."""

    rootless: bool
    cgroup_version: str          # v1 | v2 (podman info's host.cgroupVersion)
    controllers: frozenset[str]  # of CONTROLLERS

    def unenforced(self, limits: EpisodeLimits | None) -> list[str]:
        """The controllers of the limits asked for that no container cgroup enforces."""
        asked = ({"memory": limits.memory_mb, "pids": limits.pids, "cpu": limits.cpus}
                 if limits is not None else {})
        return [name for name, value in asked.items() if value and name not in self.controllers]

    def unenforced_warning(self, limits: EpisodeLimits | None) -> str | None:
        """The warning that names the limits not enforced and what holds instead."""
        missing = self.unenforced(limits)
        if not missing:
            return None
        return (f"sandbox=container: rootless podman on cgroup {self.cgroup_version} cannot "
                f"limit a container's {', '.join(missing)} (no such controller delegated to "
                f"this user): {'; '.join(FALLBACK[name] for name in missing)}; the disk watch "
                "and the time budget hold (agentrl doctor)")


ROOTFUL = PodmanHost(False, "", frozenset(CONTROLLERS))


def find_podman() -> str | None:
    """The podman binary: ``$AGENTRL_PODMAN``, else ``podman`` on PATH, else None."""
    named = os.environ.get(PODMAN_ENV)
    if named:
        return named if Path(named).is_file() else None
    return shutil.which("podman")


def podman_prefix() -> list[str]:
    """podman and its global options (the runtime); a ``FileNotFoundError`` says how to
    install it."""
    podman = find_podman()
    if podman is None:
        raise FileNotFoundError(f"sandbox=container needs podman: {INSTALL_PODMAN}")
    runtime = os.environ.get(RUNTIME_ENV)
    return [podman, *(["--runtime", runtime] if runtime else [])]


@functools.cache
def podman_host(prefix: tuple[str, ...]) -> PodmanHost:
    """``podman info`` of ``prefix``'s podman, once per process; a ``RuntimeError`` says
    why podman cannot run here."""
    try:
        done = subprocess.run([*prefix, "info", "--format", "json"], capture_output=True,
                              text=True, timeout=PODMAN_TIMEOUT_S, stdin=subprocess.DEVNULL)
        host = json.loads(done.stdout)["host"] if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError) as err:
        raise RuntimeError(f"podman info failed: {err}") from err
    if host is None:
        raise RuntimeError(f"podman cannot run here: {_last_line(done.stderr)}")
    rootless = bool(host.get("security", {}).get("rootless", os.geteuid() != 0))
    if not rootless:
        return ROOTFUL
    delegated = frozenset(host.get("cgroupControllers") or ()) & frozenset(CONTROLLERS)
    return PodmanHost(True, str(host.get("cgroupVersion", "")), delegated)


def _ulimit(name: str, value: int) -> str:
    """``--ulimit=name=value:value``, at most the trainer's own hard limit."""
    hard = resource.getrlimit(ULIMITS[name])[1]
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    return f"--ulimit={name}={value}:{value}"


async def podman(prefix: list[str], *args: str,
                 timeout_s: float = PODMAN_TIMEOUT_S) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one podman command; killed after ``timeout_s``."""
    proc = await asyncio.create_subprocess_exec(
        *prefix, *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, "", f"podman {' '.join(args)} took more than {timeout_s:g} s"
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def container_argv(spec: SandboxSpec, prefix: list[str], name: str, pidfile: Path,
                   command: list[str], env: dict[str, str],
                   host: PodmanHost = ROOTFUL) -> list[str]:
    """``podman run`` of ``command`` in ``spec``'s container (the module docstring); a
    limit ``host`` cannot set in a cgroup is left out (rootless: its fallback instead)."""
    limits = spec.limits or EpisodeLimits(None, None, None, None)
    cgroup = host.controllers
    argv = [*prefix, "run", "--name", name, "--pull=never", "--log-driver=none",
            "--network=none", "--read-only", "--cap-drop=all",
            "--security-opt=no-new-privileges", "--init", "--hostname=agentrl",
            *(["--userns=keep-id"] if host.rootless else []),
            "--pidfile", str(pidfile), "--workdir", str(spec.workdir),
            _ulimit("core", 0), _ulimit("cpu", spec.cpu_s),
            _ulimit("fsize", spec.file_size_mb << 20), _ulimit("nofile", spec.open_files),
            _ulimit("nproc", limits.pids or DEFAULT_NPROC)]
    if "pids" in cgroup:
        argv += [f"--pids-limit={limits.pids or -1}"]
    if limits.memory_mb and "memory" in cgroup:
        argv += [f"--memory={limits.memory_mb}m", f"--memory-swap={limits.memory_mb}m"]
    elif limits.memory_mb:
        argv += [_ulimit("data", limits.memory_mb << 20)]
    if limits.cpus and "cpu" in cgroup:
        argv += [f"--cpus={limits.cpus}"]
    for path in (*checked_binds(spec.visible), *checked_binds(spec.ro_binds)):
        argv += ["--volume", f"{path}:{path}:ro"]
    for host, inside in spec.writable:
        argv += ["--volume", f"{host}:{inside}"]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    return [*argv, str(spec.image), *command]


class ContainerSandbox(Sandbox):
    """One podman container per run (the module docstring)."""

    def __init__(self, spec: SandboxSpec) -> None:
        if not spec.image:
            raise ValueError("sandbox=container needs an image: AGENTRL_AGENT_IMAGE, "
                             "agent(image=...) or the row's extra_info.agent.image")
        super().__init__(spec)
        self.prefix = podman_prefix()
        self.name = f"{spec.name}-{secrets.token_hex(4)}"
        self.folder = Path(tempfile.mkdtemp(prefix="agentrl-podman-"))  # its pidfile
        self.host: PodmanHost | None = None  # what podman limits here (start)

    async def start(self) -> None:
        status, _, err = await podman(self.prefix, "image", "exists", str(self.spec.image))
        if status == 1:
            raise FileNotFoundError(
                f"the container image {self.spec.image!r} is not in podman's store: podman "
                "pull, load or build it first (the sandbox never pulls)")
        if status != 0:
            raise RuntimeError(f"podman cannot run here: {_last_line(err)}")
        self.host = await asyncio.to_thread(podman_host, tuple(self.prefix))
        warning = self.host.unenforced_warning(self.spec.limits)
        if warning is not None:
            _warn_once(warning)

    async def run(self, command: list[str], env: dict[str, str], timeout_s: float,
                  stop: asyncio.Event | None = None) -> CagedResult:
        spec = self.spec
        if self.host is None:
            self.host = await asyncio.to_thread(podman_host, tuple(self.prefix))
        pidfile = self.folder / f"{self.name}.pid"
        argv = container_argv(spec, self.prefix, self.name, pidfile, command, env, self.host)
        limiter = (await asyncio.to_thread(Limiter, spec.limits, 0, {}, list(spec.watched))
                   if spec.limits is not None else None)
        # without its own memory and pids cgroups the container shares the trainer's: none
        # to watch (the limiter then watches the disk only)
        own_cgroup = {"memory", "pids"} <= self.host.controllers
        finder = asyncio.ensure_future(_find_cgroup(pidfile, limiter if own_cgroup else None))
        try:  # podman itself runs with the host's environment; the container gets ``env``
            result = await run_caged(argv, dict(os.environ), spec, timeout_s, stop, limiter)
            if result.stopped == "exit" and not pidfile.exists():  # no container ever ran
                why = _last_line(result.stderr)
                hint = (f" (set {RUNTIME_ENV}=runc: apt-get install runc)"
                        if "hybrid mode" in why else "")
                raise RuntimeError(f"podman run failed: {why}{hint}")
            if result.returncode == 137 and result.limit is None and limiter is not None:
                result.limit = await self._oom_killed()
                result.stopped = "limit" if result.limit else result.stopped
            return result
        finally:
            finder.cancel()
            await asyncio.shield(self._remove())

    async def close(self) -> None:
        await asyncio.shield(self._remove())
        shutil.rmtree(self.folder, ignore_errors=True)

    async def _oom_killed(self) -> str | None:
        """``memory`` where the kernel's OOM killer ended the container's first process."""
        status, out, _ = await podman(self.prefix, "inspect", "--format",
                                      "{{.State.OOMKilled}}", self.name)
        return "memory" if status == 0 and out.strip() == "true" else None

    async def _remove(self) -> None:
        status, _, err = await podman(self.prefix, "rm", "--force", "--ignore", "--time", "0",
                                      self.name)
        if status != 0:
            logger.warning("podman rm %s: %s", self.name, _last_line(err))


async def _find_cgroup(pidfile: Path, limiter: Limiter | None, every_s: float = 0.05) -> None:
    """Point ``limiter`` at the container's cgroup once its first process runs."""
    if limiter is None:
        return
    while True:
        with contextlib.suppress(OSError, ValueError):
            found = process_cgroups(int(pidfile.read_text().strip()))
            if found is not None:
                limiter.version, limiter.folders = found
                return
        await asyncio.sleep(every_s)


@functools.cache
def _warn_once(message: str) -> None:
    logger.warning("%s", message)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


__all__ = ["FALLBACK", "INSTALL_PODMAN", "PODMAN_ENV", "ROOTFUL", "RUNTIME_ENV", "ContainerSandbox",
           "PodmanHost", "container_argv", "find_podman", "podman", "podman_host",
           "podman_prefix"]
