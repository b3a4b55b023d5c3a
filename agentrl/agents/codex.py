"""The Codex CLI as a harness agent: ``agentrl.agents.codex.run`` in agent mode.

    actor_rollout_ref.rollout.agent_function: agentrl.agents.codex.run

Each sample runs ``codex exec --json --skip-git-repo-check
--dangerously-bypass-approvals-and-sandbox -m policy PROMPT`` in a fresh workspace inside
agentrl's sandbox (harness.py; Codex's own sandbox is bypassed: it cannot nest in ours),
with ``CODEX_HOME`` in the episode's home holding a ``config.toml`` whose provider
``agentrl`` speaks the Responses API to the sample's gateway session, and the flags that
keep it off the network (``analytics.enabled=false``; plugins, remote plugins, apps, update
checks and model discovery disabled; so are its subagent tools, which ``--enable
multi_agent`` in the extra arguments offers). ``AGENTRL_CODEX_BIN`` names the binary (else
``codex`` on PATH) and ``AGENTRL_CODEX_ARGS`` adds arguments; ``agent(**options)`` as in
claude_code.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentrl.agents.harness import MODEL_NAME, AgentOptions, Harness, run_episode

CONFIG = """model_provider = "agentrl"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.agentrl]
name = "agentrl"
base_url = "http://127.0.0.1/v1"
wire_api = "responses"
env_key = "AGENTRL_API_KEY"
"""
# features turned off: the network's (plugins, apps, updates, model discovery) and the
# subagent tools (multi_agent: the multi_agent_v1 group, ~5k characters of schemas in every
# prompt); ``extra_args=("--enable", "multi_agent")`` offers them (docs/agents.md)
DISABLED = ("plugins", "remote_plugin", "apps", "in_app_updates", "api_key_model_discovery",
            "multi_agent")


def _command(binary: str, prompt: str, home: Path, extra: list[str]) -> list[str]:
    # a feature the extra arguments --enable is not disabled (Codex keeps the first flag)
    enabled = {extra[i + 1] for i, arg in enumerate(extra[:-1]) if arg == "--enable"}
    disabled = [arg for feature in DISABLED if feature not in enabled
                for arg in ("--disable", feature)]
    return [binary, "exec", "--json", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", "-m", MODEL_NAME,
            "-c", "analytics.enabled=false",
            "-c", 'model_providers.agentrl.base_url="http://127.0.0.1:{port}/v1"',
            *disabled, *extra, prompt]


def _environment(home: Path) -> dict[str, str]:
    return {"CODEX_HOME": str(home / "codex"), "AGENTRL_API_KEY": "agentrl"}


def _prepare(home: Path) -> None:
    (home / "codex").mkdir()
    (home / "codex" / "config.toml").write_text(CONFIG)


def _final_text(stdout: str) -> str:
    """The text of the last agent message among ``codex exec --json``'s events."""
    text = ""
    for line in stdout.splitlines():
        try:
            item = json.loads(line).get("item") or {}
        except (json.JSONDecodeError, AttributeError):
            continue
        if item.get("type") == "agent_message":
            text = str(item.get("text") or "")
    return text


CODEX = Harness(name="codex", binary_env="AGENTRL_CODEX_BIN", binary_name="codex",
                args_env="AGENTRL_CODEX_ARGS", command=_command, environment=_environment,
                prepare_home=_prepare, final_text=_final_text)


def agent(**options: Any):
    """An agent function with these options (harness.AgentOptions' fields) over the
    environment's; checked now, so a typo fails at load time."""
    AgentOptions.from_env(CODEX, **options)

    async def run(task: dict, client: Any) -> dict[str, Any]:
        return await run_episode(CODEX, task, client, AgentOptions.from_env(CODEX, **options))
    return run


async def run(task: dict, client: Any) -> dict[str, Any]:
    """One Codex episode on ``task`` through ``client``'s gateway session; the reward dict
    (``score``, ``turns``, ``stopped``, ``cli_exit``, ``check_exit``)."""
    return await run_episode(CODEX, task, client, AgentOptions.from_env(CODEX))
