"""Claude Code as a harness agent: ``agentrl.agents.claude_code.run`` in agent mode.

    actor_rollout_ref.rollout.agent_function: agentrl.agents.claude_code.run
    actor_rollout_ref.rollout.agent_client: anthropic      # or openai: the relay uses either

Each sample runs ``claude -p PROMPT --output-format json --dangerously-skip-permissions
--model policy`` in a fresh workspace inside the sandbox (harness.py), with
``ANTHROPIC_BASE_URL`` on the sample's gateway session and ``DISABLE_TELEMETRY=1``,
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (no call but the episode's), ``IS_SANDBOX=1``
(it refuses the permission flag as root without it), ``CLAUDE_CONFIG_DIR`` in the episode's
home. ``AGENTRL_CLAUDE_BIN`` names the binary (else ``claude`` on PATH) and
``AGENTRL_CLAUDE_ARGS`` adds arguments (``--bare``: a 178-character system prompt and 3
tools instead of ~19k tokens and 24, what a tiny model can hold). Your own options::

    # my_agent.py, then rollout.agent_function=my_agent.py:run
    from agentrl.agents import claude_code
    run = claude_code.agent(extra_args=("--bare",), max_turns=6, timeout_s=120)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentrl.agents.harness import MODEL_NAME, AgentOptions, Harness, run_episode


def _command(binary: str, prompt: str, home: Path, extra: list[str]) -> list[str]:
    return [binary, *extra, "--output-format", "json", "--dangerously-skip-permissions",
            "--model", MODEL_NAME, "-p", prompt]


def _environment(home: Path) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": "http://127.0.0.1:{port}", "ANTHROPIC_API_KEY": "agentrl",
            "CLAUDE_CONFIG_DIR": str(home / "claude"), "IS_SANDBOX": "1",
            "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1"}


def _prepare(home: Path) -> None:
    (home / "claude").mkdir()


def _final_text(stdout: str) -> str:
    try:
        return str(json.loads(stdout).get("result") or "")
    except (json.JSONDecodeError, AttributeError):
        return ""


CLAUDE_CODE = Harness(name="claude_code", binary_env="AGENTRL_CLAUDE_BIN",
                      binary_name="claude", args_env="AGENTRL_CLAUDE_ARGS",
                      command=_command, environment=_environment, prepare_home=_prepare,
                      final_text=_final_text, max_output_env="CLAUDE_CODE_MAX_OUTPUT_TOKENS")


def agent(**options: Any):
    """An agent function with these options (harness.AgentOptions' fields) over the
    environment's; checked now, so a typo fails at load time."""
    AgentOptions.from_env(CLAUDE_CODE, **options)

    async def run(task: dict, client: Any) -> dict[str, Any]:
        return await run_episode(CLAUDE_CODE, task, client,
                                 AgentOptions.from_env(CLAUDE_CODE, **options))
    return run


async def run(task: dict, client: Any) -> dict[str, Any]:
    """One Claude Code episode on ``task`` through ``client``'s gateway session; the
    reward dict (``score``, ``turns``, ``stopped``, ``cli_exit``, ``check_exit``)."""
    return await run_episode(CLAUDE_CODE, task, client, AgentOptions.from_env(CLAUDE_CODE))
