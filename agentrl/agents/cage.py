"""The agent cage's one interface: a ``Sandbox`` runs an episode's commands, a plugin per kind.

    box = sandbox_class(options.sandbox)(spec)  # bwrap | container | none | pkg.mod.MyBox
    await box.start()                           # make the cage (a container, a remote box)
    await box.copy_in(episode / "workspace", spec.workdir)
    result = await box.run(["python3", "bridge.py", ...], env, timeout_s, stop)
    await box.copy_out(spec.workdir, episode / "workspace")
    await box.close()                           # nothing of it left running

The built-in kinds: ``bwrap`` (sandbox.py, the default: bubblewrap over an allow-listed
root), ``container`` (container.py: a podman container from an image) and ``none`` (the
same processes without a cage: trusted tasks only). Any other value is a dotted path
(``pkg.mod.Name`` or ``file.py:Name``) of a ``Sandbox`` subclass, loaded by the project's
one plugin loader (agentrl/plugins.py) and checked against this base class: a remote
sandbox service or another container engine is one file.

What an implementation must do (docs/agents.md, "Sandboxes as plugins"):

- ``run``: start ``command`` in ``spec.workdir`` as the cage sees it, with exactly ``env``
  (nothing of the trainer's environment), under ``spec``'s limits; end it, with every
  process it started, after ``timeout_s``, when ``stop`` is set, when a limit of
  ``spec.limits`` trips or when cancelled; return how it ended (``CagedResult``).
- the folders of ``spec.writable`` (host path, path inside) are the episode's: the
  harness fills them on the host before ``copy_in`` and reads them after ``copy_out``. The
  default copies assume what bind mounts give (the inside path shows the host path: the
  copy is then nothing); a remote sandbox uploads and downloads instead. The gateway's
  unix socket is one of them: a sandbox that cannot bind it must carry its bytes.
- ``isolated``: False only where the command sees the host's files at their own paths
  (``none``); the harness then keeps the host's ``PATH`` and a temp folder of the episode.
"""

from __future__ import annotations

import asyncio
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from agentrl.agents.limits import EpisodeLimits

BUILT_IN = {"bwrap": "agentrl.agents.sandbox.BwrapSandbox",
            "none": "agentrl.agents.sandbox.UncagedSandbox",
            "container": "agentrl.agents.container.ContainerSandbox"}
SANDBOX_KINDS = tuple(BUILT_IN)


@dataclass(frozen=True)
class SandboxSpec:
    """What one caged run may touch and use."""

    kind: str                    # bwrap | container | none | a Sandbox class's path
    workdir: Path                # where the command starts, as seen inside
    writable: tuple[tuple[Path, Path], ...] = ()  # (host path, path inside), read-write
    bwrap: str | None = None     # the bwrap binary (kind=bwrap)
    visible: tuple[str, ...] = ()   # install folders shown read-only (the CLI, node, Python)
    ro_binds: tuple[str, ...] = ()  # more host paths shown read-only (what the task needs)
    cpu_s: int = 600             # RLIMIT_CPU, CPU seconds per process
    file_size_mb: int = 256      # RLIMIT_FSIZE
    open_files: int = 4096       # RLIMIT_NOFILE
    memory_mb: int | None = None  # RLIMIT_AS per process; None: not limited
    limits: EpisodeLimits | None = None  # the whole run's limits (limits.py); None: none
    name: str = "agentrl-run"    # the run's cgroup or container name (unique per run)
    watched: tuple[Path, ...] = ()  # host folders the disk limit sums
    image: str | None = None     # the container image (kind=container)


@dataclass
class CagedResult:
    """How a caged run ended."""

    returncode: int | None  # None: killed at the budget or a limit
    stdout: str
    stderr: str
    stopped: str            # exit | timeout | turns | limit
    limit: str | None = None  # the episode limit that tripped: memory | pids | disk


def same_place(*paths: Path) -> tuple[tuple[Path, Path], ...]:
    """``writable`` entries that show each host path at the same place inside."""
    return tuple((Path(p), Path(p)) for p in paths)


class Sandbox(ABC):
    """One cage for one run's ``spec`` (the module docstring says what each method owes)."""

    isolated: ClassVar[bool] = True  # False: the command sees the host's files (kind none)

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec

    async def start(self) -> None:
        """Make the cage ready to run in (nothing to do for a cage made per command)."""
        return None

    @abstractmethod
    async def run(self, command: list[str], env: dict[str, str], timeout_s: float,
                  stop: asyncio.Event | None = None) -> CagedResult:
        """Run ``command`` caged; see the module docstring."""

    async def copy_in(self, source: Path, inside: Path) -> None:
        """Put the host's ``source`` (a folder or a file) at ``inside``, replacing it."""
        target = self.host_path(inside)
        if target.resolve() != Path(source).resolve():
            await asyncio.to_thread(_copy, Path(source), target)

    async def copy_out(self, inside: Path, target: Path) -> None:
        """Put ``inside`` (a folder or a file of the cage) at the host's ``target``,
        replacing it."""
        source = self.host_path(inside)
        if source.resolve() != Path(target).resolve():
            await asyncio.to_thread(_copy, source, Path(target))

    async def close(self) -> None:
        """Tear the cage down: nothing of it runs or stays behind."""
        return None

    def host_path(self, inside: Path) -> Path:
        """The host path ``inside`` shows, through ``spec.writable``; a ``ValueError``
        when it is in none of them."""
        inside = Path(inside)
        for host, seen in self.spec.writable:
            if inside == seen or inside.is_relative_to(seen):
                return Path(host) / inside.relative_to(seen)
        raise ValueError(f"{inside} is in none of the sandbox's writable folders")


def _copy(source: Path, target: Path) -> None:
    """``target`` becomes a copy of ``source`` (links kept as links)."""
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target)


def sandbox_class(kind: str) -> type[Sandbox]:
    """The ``Sandbox`` class of ``kind``: a built-in name or a class's dotted path; a
    ``ValueError`` names a value that is neither (with the built-ins)."""
    from agentrl.plugins import PluginLoadError, load_object

    if kind not in BUILT_IN and "." not in kind:
        raise ValueError(f"agent sandbox must be one of {SANDBOX_KINDS} or the dotted path of "
                         f"a Sandbox class (pkg.module.Name), got {kind!r} "
                         "(AGENTRL_AGENT_SANDBOX)")
    try:
        return load_object(BUILT_IN.get(kind, kind), Sandbox)
    except PluginLoadError as err:
        raise ValueError(f"agent sandbox {kind!r}: {err}") from err


__all__ = ["BUILT_IN", "SANDBOX_KINDS", "CagedResult", "Sandbox", "SandboxSpec",
           "same_place", "sandbox_class"]
