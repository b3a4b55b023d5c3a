"""The real agent CLIs (Claude Code, Codex) against the gateway with the scripted backend:
the policy's replies call the shell tool, then answer; the recorded trajectory's trained
tokens are exactly the policy's output ids, the tool's output is in it untrained, no fork.

Marked ``harness``. The CLIs come from npm (``npm install --prefix DIR @anthropic-ai/claude-code
@openai/codex``); each test finds its binary through ``AGENTRL_CLAUDE_BIN`` /
``AGENTRL_CODEX_BIN`` or ``PATH`` (``claude`` / ``codex``) and is skipped, saying so, where node
or the binary is absent. The CLI runs its tool calls for real, as this user: the scripted
commands only write one file in the test's temporary workspace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from agentrl.gateway import create_app
from agentrl.testing.rollout import call_text
from agentrl.utils.serving import serve_in_thread

pytestmark = pytest.mark.harness
TIMEOUT_S = 60
MARK = "hello-from-the-policy"


def _binary(env_var: str, name: str) -> str:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the agent CLIs need it (npm install --prefix DIR "
                    "@anthropic-ai/claude-code @openai/codex)")
    path = os.environ.get(env_var) or shutil.which(name)
    if not path or not Path(path).exists():
        pytest.skip(f"the {name} CLI was not found: set {env_var} or put {name} on PATH "
                    "(npm install --prefix DIR @anthropic-ai/claude-code @openai/codex)")
    return path


def _shell_call(tool: str, key: str, command: str) -> str:
    return call_text(tool, "").replace('{"text": ""}', json.dumps({key: command}))


def _episode(tokenizer, replies: list[str], command: list[str], env: dict[str, str],
             workspace: Path, base: str):  # fmt: skip
    """Run the CLI against a gateway over the scripted backend; (the CLI's result, the
    session's record, the backend)."""
    from agentrl.rollout.backends.scripted import ScriptedBackend as Replies

    backend = Replies(replies, tokenizer)
    with serve_in_thread(create_app(backend, tokenizer, model_name="policy")) as url:
        full_env = {**os.environ, **{k: v.replace("{url}", url) for k, v in env.items()}}
        done = subprocess.run(command + [f"Write {MARK} to note.txt"], cwd=workspace,
                              env=full_env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=TIMEOUT_S)  # fmt: skip
        record = httpx.get(f"{url}/sessions/{base}").json()
    return done, record, backend


def _assert_token_exact(record: dict, backend, tokenizer) -> None:
    assert record["rewrites"] == 0 and record["forks"] == []
    (trajectory,) = record["trajectories"]
    ids, mask = trajectory["token_ids"], trajectory["loss_mask"]
    outputs = [out for rid, out in backend.outputs if "~side" not in rid]
    assert len(outputs) == 2
    assert [t for t, m in zip(ids, mask, strict=True) if m == 1] == outputs[0] + outputs[1]
    start = trajectory["prompt_length"] + len(outputs[0])
    tool_span = ids[start:len(ids) - len(outputs[1])]
    assert set(mask[start:len(ids) - len(outputs[1])]) == {0}
    assert MARK in tokenizer.decode(tool_span)  # the command's output, untrained


def test_claude_code_bare_is_recorded_token_exact(tiny_tokenizer, tmp_path):
    claude = _binary("AGENTRL_CLAUDE_BIN", "claude")
    workspace, config = tmp_path / "workspace", tmp_path / "claude-config"
    workspace.mkdir()
    config.mkdir()
    replies = [_shell_call("Bash", "command", f"echo {MARK} | tee note.txt"), "done"]
    env = {"IS_SANDBOX": "1", "CLAUDE_CONFIG_DIR": str(config), "ANTHROPIC_API_KEY": "dummy",
           "ANTHROPIC_BASE_URL": "{url}/sessions/cc", "DISABLE_TELEMETRY": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    command = [claude, "--bare", "--output-format", "json", "--dangerously-skip-permissions",
               "--model", "policy", "-p"]
    done, record, backend = _episode(tiny_tokenizer, replies, command, env, workspace, "cc")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["result"] == "done"
    assert (workspace / "note.txt").read_text() == f"{MARK}\n"
    assert [rid for rid, _ in backend.outputs] == ["cc-t0-a0", "cc-t1-a0"]
    _assert_token_exact(record, backend, tiny_tokenizer)


def test_codex_exec_is_recorded_token_exact(tiny_tokenizer, tmp_path):
    codex = _binary("AGENTRL_CODEX_BIN", "codex")
    workspace, home = tmp_path / "workspace", tmp_path / "codex-home"
    workspace.mkdir()
    home.mkdir()
    replies = [_shell_call("exec_command", "cmd", f"echo {MARK} | tee note.txt"), "done"]
    env = {"CODEX_HOME": str(home), "AGENTRL_API_KEY": "dummy"}
    command = [codex, "exec", "--json", "--skip-git-repo-check",
               "--dangerously-bypass-approvals-and-sandbox", "-m", "policy",
               "-c", "analytics.enabled=false", "--disable", "plugins", "--disable",
               "remote_plugin", "--disable", "apps", "--disable", "in_app_updates",
               "--disable", "api_key_model_discovery"]
    # the provider's base URL is only known once the gateway listens: a config per run
    from agentrl.rollout.backends.scripted import ScriptedBackend as Replies

    backend = Replies(replies, tiny_tokenizer)
    with serve_in_thread(create_app(backend, tiny_tokenizer, model_name="policy")) as url:
        (home / "config.toml").write_text(
            'model_provider = "agentrl"\napproval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n[model_providers.agentrl]\n'
            f'name = "agentrl"\nbase_url = "{url}/sessions/cx/v1"\nwire_api = "responses"\n'
            'env_key = "AGENTRL_API_KEY"\n')
        done = subprocess.run(command + [f"Write {MARK} to note.txt"], cwd=workspace,
                              env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=TIMEOUT_S)  # fmt: skip
        record = httpx.get(f"{url}/sessions/cx").json()
    assert done.returncode == 0, done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["type"] == "turn.completed"
    assert any(e.get("item", {}).get("text") == "done" for e in events)
    assert (workspace / "note.txt").read_text() == f"{MARK}\n"
    assert [rid for rid, _ in backend.outputs] == ["cx-t0-a0", "cx-t1-a0"]
    _assert_token_exact(record, backend, tiny_tokenizer)
