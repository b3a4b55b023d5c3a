"""One episode of an agent CLI (a harness) on one dataset row, sandboxed, scored afterwards.

    result = await run_episode(CLAUDE_CODE, task, client, AgentOptions.from_env(CLAUDE_CODE))

The steps: a fresh episode folder (``workspace/`` made from the row, ``home/`` for the CLI's
state, the gateway socket); the relay on that socket to the sample's gateway session
(relay.py); the CLI started through bridge.py inside the sandbox (sandbox.py), its base URL
on the bridge's loopback port, its prompt from the row, the flags that keep every call on
the gateway; killed with its whole process tree at the wall-clock budget or at the call
after the turn budget; then, once the CLI's processes are dead, the row's check run in a
fresh cage over a copy of the workspace with the row's ``check_files`` written into it
(exit 0 -> 1.0, else 0.0), or, without a check, the task's scorer on the CLI's final text
(``agentrl.reward.default_compute_score`` with ``data_source`` and ``reward_model
.ground_truth``); the folder is deleted. The return value is agent mode's reward dict:
``score`` plus how the episode went (``turns``, ``stopped``, ``cli_exit``, ``check_exit``).

Options come from, in order: the defaults below, environment variables (``AGENTRL_AGENT_*``
and each harness's ``AGENTRL_CLAUDE_*`` / ``AGENTRL_CODEX_*``), the keyword arguments of
``agent(...)`` in claude_code.py / codex.py, and the row's ``extra_info.agent``
(``max_turns``, ``timeout_s``; ``ro_binds`` and ``interpreters`` add to the options').
docs/agents.md lists them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.agents.cage import CagedResult, Sandbox, SandboxSpec, same_place, sandbox_class
from agentrl.agents.limits import EPISODE_PREFIX, EpisodeLimits
from agentrl.agents.relay import SessionRelay
from agentrl.agents.sandbox import SANDBOX_PATH, in_system_dirs, install_folder
from agentrl.agents.workspace import (
    check_copy,
    extra_info,
    make_workspace,
    prompt_text,
    row_budget,
    row_image,
    row_sandbox,
)

logger = logging.getLogger(__name__)

BRIDGE = Path(__file__).with_name("bridge.py")
INSTALL_CLIS = "scripts/setup_agent_clis.sh (npm install @anthropic-ai/claude-code @openai/codex)"
MODEL_NAME = "policy"


@dataclass(frozen=True)
class Harness:
    """What differs between agent CLIs: how to find, configure, start and read one."""

    name: str
    binary_env: str                 # the variable naming the binary
    binary_name: str                # else this on PATH
    args_env: str                   # extra arguments, shell-split
    command: Callable[[str, str, Path, list[str]], list[str]]  # (binary, prompt, home, extra)
    environment: Callable[[Path], dict[str, str]]               # (home) -> CLI variables
    prepare_home: Callable[[Path], None]
    final_text: Callable[[str], str]                            # the CLI's stdout -> answer
    max_output_env: str | None = None  # the CLI's variable for max_tokens per call, if any


def _env(name: str, default: Any, kind: Callable[[str], Any]) -> Any:
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    try:
        return kind(value)
    except ValueError as err:
        raise ValueError(f"{name}={value!r}: {err}") from err


def _int_or_off(value: str) -> int | None:
    return int(value) or None  # 0: not limited


@dataclass(frozen=True)
class AgentOptions:
    """How an episode runs (docs/agents.md)."""

    binary: str | None = None       # the CLI; None: $binary_env, else binary_name on PATH
    extra_args: tuple[str, ...] = ()  # more CLI arguments (e.g. --bare for Claude Code)
    max_turns: int = 16             # model calls; the next one kills the CLI
    timeout_s: float = 240.0        # wall clock of the CLI (keep below rollout.agent_timeout)
    check_timeout_s: float = 60.0   # wall clock of the row's check
    sandbox: str = "bwrap"          # bwrap | container | none (no isolation: trusted tasks
                                    # only) | the dotted path of a Sandbox class (cage.py)
    image: str | None = None        # the container image (sandbox=container)
    memory_mb: int | None = None    # RLIMIT_AS per process; None: not limited
    episode_memory_mb: int | None = EpisodeLimits.memory_mb  # all processes together (cgroup)
    episode_pids: int | None = EpisodeLimits.pids       # processes and threads (cgroup)
    episode_cpus: float | None = EpisodeLimits.cpus     # CPU share in cores (cgroup)
    disk_mb: int | None = EpisodeLimits.disk_mb         # the episode's writable folders
    max_output_tokens: int | None = None  # tokens per model call the CLI asks for (Claude Code)
    file_size_mb: int = SandboxSpec.file_size_mb  # RLIMIT_FSIZE
    root: str | None = None         # where episode folders go; None: the temp dir
    keep: bool = False              # keep episode folders (debugging)
    ro_binds: tuple[str, ...] = field(default_factory=tuple)  # host paths shown read-only
    interpreters: tuple[str, ...] = field(default_factory=tuple)  # programs shown, on PATH

    def limits(self) -> EpisodeLimits:
        """The whole episode's limits (limits.py)."""
        return EpisodeLimits(self.episode_memory_mb, self.episode_pids, self.episode_cpus,
                             self.disk_mb)

    @classmethod
    def from_env(cls, harness: Harness, **overrides: Any) -> AgentOptions:
        """Defaults <- environment variables <- ``overrides``."""
        base = cls(
            binary=os.environ.get(harness.binary_env) or None,
            extra_args=tuple(shlex.split(os.environ.get(harness.args_env, ""))),
            max_turns=_env("AGENTRL_AGENT_MAX_TURNS", cls.max_turns, int),
            timeout_s=_env("AGENTRL_AGENT_TIMEOUT_S", cls.timeout_s, float),
            check_timeout_s=_env("AGENTRL_AGENT_CHECK_TIMEOUT_S", cls.check_timeout_s, float),
            sandbox=_env("AGENTRL_AGENT_SANDBOX", cls.sandbox, str),
            image=os.environ.get("AGENTRL_AGENT_IMAGE") or None,
            memory_mb=_env("AGENTRL_AGENT_MEMORY_MB", cls.memory_mb, int),
            episode_memory_mb=_env("AGENTRL_AGENT_EPISODE_MEMORY_MB", cls.episode_memory_mb,
                                   _int_or_off),
            episode_pids=_env("AGENTRL_AGENT_EPISODE_PIDS", cls.episode_pids, _int_or_off),
            episode_cpus=_env("AGENTRL_AGENT_EPISODE_CPUS", cls.episode_cpus,
                              lambda v: float(v) or None),
            disk_mb=_env("AGENTRL_AGENT_DISK_MB", cls.disk_mb, _int_or_off),
            max_output_tokens=_env("AGENTRL_AGENT_MAX_OUTPUT_TOKENS", None, int),
            root=os.environ.get("AGENTRL_AGENT_ROOT") or None,
            keep=_env("AGENTRL_AGENT_KEEP", False, lambda v: v not in ("0", "false")),
        )  # fmt: skip
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"unknown agent option(s) {unknown}; valid: "
                            f"{[f.name for f in dataclasses.fields(cls)]}")
        options = dataclasses.replace(base, **overrides)
        sandbox_class(options.sandbox)  # a bad kind or class is named now, not per episode
        return options


def find_binary(harness: Harness, options: AgentOptions) -> str:
    """The CLI to run; a ``FileNotFoundError`` says how to install it."""
    path = options.binary or shutil.which(harness.binary_name)
    if not path or not Path(path).exists():
        raise FileNotFoundError(
            f"the {harness.binary_name} CLI was not found: set {harness.binary_env} or put "
            f"{harness.binary_name} on PATH ({INSTALL_CLIS})")
    return path


def _python() -> str:
    """The base interpreter that runs bridge.py (a venv's python is a link to it: the
    venv, inside the project checkout, is not shown)."""
    named = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return str(named) if named.exists() else os.path.realpath(sys.executable)


def _program(name: str) -> str:
    path = name if os.sep in name else shutil.which(name)
    if not path or not os.path.exists(path):
        raise FileNotFoundError(f"interpreters: {name!r} was not found on PATH (a program the "
                                "task asked to run in the agent sandbox)")
    return os.path.realpath(path)


@dataclass(frozen=True)
class _Cage:
    """The episode's sandbox kind, its spec and the environment its processes start with."""

    kind: type[Sandbox]
    spec: SandboxSpec
    env: dict[str, str]
    python: str


def _cage(options: AgentOptions, task: Mapping[str, Any], episode: Path, cpu_s: float,
          binary: str) -> _Cage:
    """The allow-list: the CLI's install folder, node's, Python's (for bridge.py), the
    interpreters the options and the row name, the row's ``ro_binds``; the workspace, the
    CLI's home and the gateway socket read-write."""
    kind = sandbox_class(options.sandbox)
    row = row_sandbox(task)
    node = shutil.which("node")
    programs = [_program(p) for p in (*([node] if node else []), *options.interpreters,
                                      *row.get("interpreters", ()))]
    python = _python()
    shown = [install_folder(binary), *(install_folder(p) for p in programs), str(BRIDGE),
             sys.base_prefix, python]
    visible: list[str] = []
    for path in map(str, shown):
        if not in_system_dirs(path) and path not in visible and not any(
                Path(path).is_relative_to(v) for v in visible):
            visible.append(path)
    spec = SandboxSpec(kind=options.sandbox, workdir=episode / "workspace",
                       writable=same_place(episode / "workspace", episode / "home",
                                           episode / "gw.sock"),
                       visible=tuple(visible),
                       ro_binds=(*options.ro_binds, *row.get("ro_binds", ())),
                       cpu_s=int(cpu_s) + 30, file_size_mb=options.file_size_mb,
                       memory_mb=options.memory_mb, limits=options.limits(),
                       name=episode.name,
                       watched=tuple(episode / sub for sub in ("workspace", "home", "tmp")),
                       image=row_image(task) or options.image)
    folders = [os.path.dirname(p) for p in programs]
    path = ":".join(dict.fromkeys([*folders, SANDBOX_PATH, str(Path(python).parent)]))
    if not kind.isolated:
        path = os.environ.get("PATH", SANDBOX_PATH)
    return _Cage(kind, spec, _base_env(episode / "home", episode, kind, path), python)


def _base_env(home: Path, episode: Path, kind: type[Sandbox], path: str) -> dict[str, str]:
    """All the caged processes see of the host's environment (no keys, no tokens)."""
    tmp = "/tmp" if kind.isolated else str(episode / "tmp")
    return {"PATH": path, "LANG": "C.UTF-8", "HOME": str(home), "TMPDIR": tmp,
            "USER": "agent"}


async def _run_boxed(box: Sandbox, command: list[str], env: dict[str, str], folder: Path,
                     timeout_s: float, stop: Any = None) -> CagedResult:
    """One run through the Sandbox interface: start, ``folder`` in at the spec's workdir,
    run, the workdir back out to ``folder``, tear down."""
    try:
        await box.start()
        await box.copy_in(folder, box.spec.workdir)
        result = await box.run(command, env, timeout_s, stop)
        await box.copy_out(box.spec.workdir, folder)
        return result
    finally:
        await asyncio.shield(box.close())


async def _run_check(task: Mapping[str, Any], check: str, timeout: float, cage: _Cage,
                     episode: Path) -> CagedResult:
    """The check in a fresh cage over a copy of the workspace holding the row's
    ``check_files`` (seen at the workspace's own path), once the CLI's tree is dead."""
    workspace, copy = episode / "workspace", episode / "check"
    await asyncio.to_thread(check_copy, task, workspace, copy)  # however many files the
    # policy left, the rollout's event loop (the gateway, the other episodes) goes on
    inside = workspace if cage.kind.isolated else copy
    spec = dataclasses.replace(cage.spec, workdir=inside, writable=((copy, inside),),
                               name=f"{episode.name}-check", watched=(copy,))
    home = Path("/tmp") if cage.kind.isolated else copy
    env = _base_env(home, episode, cage.kind, cage.env["PATH"])
    return await _run_boxed(cage.kind(spec), ["/bin/bash", "-c", check], env, copy, timeout)


def _score(task: Mapping[str, Any], final_text: str) -> float:
    from agentrl.reward import default_compute_score

    truth = (task.get("reward_model") or {}).get("ground_truth")
    if truth is None:
        raise ValueError("the row has neither extra_info.check nor reward_model.ground_truth "
                         "to score the episode with")
    score = default_compute_score(str(task.get("data_source") or ""), final_text, truth,
                                  extra_info(task))
    return float(score["score"] if isinstance(score, dict) else score)


async def run_episode(harness: Harness, task: Mapping[str, Any], client: Any,
                      options: AgentOptions) -> dict[str, Any]:
    """One episode (the module docstring); returns ``{"score": ..., ...}``."""
    budget = row_budget(task)
    max_turns = int(budget.get("max_turns", options.max_turns))
    timeout_s = budget.get("timeout_s", options.timeout_s)
    binary = find_binary(harness, options)
    prompt = prompt_text(task)
    info = extra_info(task)
    root = Path(options.root or tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    episode = Path(tempfile.mkdtemp(prefix=EPISODE_PREFIX, dir=root))
    try:
        for sub in ("workspace", "home", "tmp"):
            (episode / sub).mkdir()
        await asyncio.to_thread(make_workspace, task, episode / "workspace")
        harness.prepare_home(episode / "home")
        cage = _cage(options, task, episode, timeout_s, binary)
        socket_path = str(episode / "gw.sock")
        if len(socket_path) > 100:
            raise ValueError(f"the episode folder's path is too long for a unix socket: "
                             f"{socket_path!r} (set AGENTRL_AGENT_ROOT to a shorter folder)")
        cli = harness.command(os.path.realpath(binary), prompt, episode / "home",
                              list(options.extra_args))
        cli_env = {**cage.env, **harness.environment(episode / "home")}
        if options.max_output_tokens and harness.max_output_env:
            cli_env[harness.max_output_env] = str(options.max_output_tokens)
        command = [cage.python, "-I", str(BRIDGE), socket_path, "--", *cli]
        box = cage.kind(cage.spec)
        async with SessionRelay(client, socket_path, max_turns) as relay:
            run = await _run_boxed(box, command, cli_env, episode / "workspace", timeout_s,
                                   relay.over_budget)
        if run.returncode not in (0, None):
            logger.warning("%s exited with %s: %s", harness.name, run.returncode,
                           run.stderr[-2000:] or run.stdout[-2000:])
        result: dict[str, Any] = {"turns": min(relay.model_calls, max_turns),
                                  "stopped": run.stopped, "cli_exit": run.returncode,
                                  "limit": run.limit, "limit_kills": int(run.limit is not None)}
        if run.limit:
            logger.warning("%s episode hit its %s limit: killed", harness.name, run.limit)
        check = info.get("check")
        if check:
            timeout = float(info.get("check_timeout_s") or options.check_timeout_s)
            checked = await _run_check(task, str(check), timeout, cage, episode)
            result["check_exit"] = checked.returncode
            result["limit_kills"] += int(checked.limit is not None)
            result["score"] = 1.0 if checked.returncode == 0 else 0.0
        else:
            result["score"] = _score(task, harness.final_text(run.stdout))
        return result
    finally:
        if not options.keep:
            await asyncio.to_thread(shutil.rmtree, episode, ignore_errors=True)


__all__ = ["BRIDGE", "INSTALL_CLIS", "MODEL_NAME", "AgentOptions", "Harness", "find_binary",
           "run_episode"]
