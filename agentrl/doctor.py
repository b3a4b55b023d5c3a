"""`agentrl doctor`: which optional parts this machine has, and how to install the others.

    agentrl doctor

One line per part: found (with its version or path) or missing (with the command that
installs it). Nothing is required for the core (training on CPU with the hf engine); each
part serves one feature:

- node and the agent CLIs, Claude Code and Codex (agentrl.agents, tests marked ``harness``),
  and bubblewrap, their sandbox, and the cgroups that limit a whole episode; podman
  (``sandbox: container``), rootless or not, and the episode limits its containers cannot get;
- the vLLM environment ``.venv-vllm`` (``rollout.name=vllm`` on CPU, tests marked ``vllm``);
- Chromium, for the report's browser test (tests/report/test_browser.py);
- the environment packages reasoning-gym, textarena, openenv-core, verifiers (``agentrl env
  prepare``).

It always exits 0: a missing part is information, not an error.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from agentrl.agents.claude_code import CLAUDE_CODE
from agentrl.agents.codex import CODEX
from agentrl.agents.container import (
    FALLBACK,
    INSTALL_PODMAN,
    find_podman,
    podman_host,
    podman_prefix,
)
from agentrl.agents.harness import INSTALL_CLIS
from agentrl.agents.limits import EpisodeLimits, cgroup_support
from agentrl.agents.sandbox import INSTALL_BWRAP, find_bwrap
from agentrl.utils.command import main_of

logger = logging.getLogger(__name__)

VERSION_TIMEOUT_S = 20
CHROMIUM = Path("/usr/bin/chromium")
# distribution -> module: one per kind of agentrl.environments.spec.SPEC_FORMS
ENV_PACKAGES = {"reasoning-gym": "reasoning_gym", "textarena": "textarena",
                "openenv-core": "openenv", "verifiers": "verifiers"}


@dataclass(frozen=True)
class Part:
    """One optional part: found or not, what was found, how to install it."""

    name: str
    found: bool
    detail: str
    install: str


def _version(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"(no version: {err})"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else f"(no version: exit {done.returncode})"


def _binary(name: str, path: str | None, install: str, flag: str = "--version") -> Part:
    if not path or not Path(path).exists():
        return Part(name, False, "not found", install)
    return Part(name, True, f"{_version([path, flag])} ({path})", install)


def _cli(harness, install: str) -> Part:
    path = os.environ.get(harness.binary_env) or shutil.which(harness.binary_name)
    part = _binary(harness.binary_name, path, install)
    if not part.found:
        return Part(part.name, False, f"not found ({harness.binary_env} unset, not on PATH)",
                    install)
    return part


def _vllm() -> Part:
    venv = Path(os.environ.get("AGENTRL_VLLM_VENV", ".venv-vllm"))
    python = venv / "bin" / "python"
    install = "bash scripts/setup_vllm_env.sh (AGENTRL_VLLM_VENV names another folder)"
    if not python.exists():
        return Part("vllm environment", False, f"no {python}", install)
    version = _version([str(python), "-c", "import vllm; print(vllm.__version__)"])
    return Part("vllm environment", not version.startswith("(no"), f"vllm {version} ({venv})",
                install)


def _package(distribution: str, module: str) -> Part:
    install = f"pip install {distribution} (or the agentrl extra that names it: envs)"
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return Part(distribution, False, f"not installed in {sys.prefix}", install)
    return Part(distribution, True, f"{version} (import {module})", install)


def _cgroups() -> Part:
    reason = cgroup_support()
    install = ("run as a user who may write the cgroup v1 memory and pids controllers or a "
               "delegated v2 cgroup (per-episode memory, process and CPU limits)")
    if reason is not None:
        return Part("episode cgroups", False, reason, install)
    return Part("episode cgroups", True, "memory, pids (and cpu where mounted)", install)


def _podman() -> Part:
    install = (f"{INSTALL_PODMAN}; rootless: the user needs /etc/subuid and /etc/subgid "
               "ranges, and AGENTRL_PODMAN_RUNTIME=runc on a hybrid cgroup v1/v2 machine")
    if find_podman() is None:
        return Part("podman", False, "not found (sandbox=container)", install)
    try:
        host = podman_host(tuple(podman_prefix()))
    except RuntimeError as err:
        return Part("podman", False, str(err), install)
    if not host.rootless:
        return Part("podman", True, "as root: episode memory, pids and cpu limits", install)
    missing = host.unenforced(EpisodeLimits(memory_mb=1, pids=1, cpus=1.0))
    detail = f"rootless, cgroup {host.cgroup_version}: episode limits " + (
        f"{', '.join(sorted(host.controllers))} held; " if host.controllers else "") + (
        f"{', '.join(missing)} not enforced in containers: "
        f"{'; '.join(FALLBACK[name] for name in missing)}" if missing else "all held")
    return Part("podman", True, detail, install)


def collect() -> list[Part]:
    """Every optional part, in the order they are listed."""
    return [
        _binary("node", shutil.which("node"), "apt-get install nodejs npm (node >= 18)"),
        _cli(CLAUDE_CODE, f"bash {INSTALL_CLIS}"),
        _cli(CODEX, f"bash {INSTALL_CLIS}"),
        _binary("bubblewrap", find_bwrap(), INSTALL_BWRAP),
        _cgroups(),
        _podman(),
        _vllm(),
        _binary("chromium", str(CHROMIUM) if CHROMIUM.exists() else None,
                "apt-get install chromium (the report's browser test)"),
        *[_package(dist, module) for dist, module in ENV_PACKAGES.items()],
    ]


def format_parts(parts: list[Part]) -> str:
    """The table ``agentrl doctor`` prints."""
    width = max(len(p.name) for p in parts)
    lines = []
    for part in parts:
        state = "found  " if part.found else "missing"
        line = f"{part.name:<{width}}  {state}  {part.detail}"
        if not part.found:
            line += f"\n{'':<{width}}           install: {part.install}"
        lines.append(line)
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.splitlines()[0]


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(format_parts(collect()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main_of(sys.modules[__name__], "doctor"))
