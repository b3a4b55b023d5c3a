"""Shared pieces of the harness-agent tests: the CLIs and bwrap (skipped, saying why, where
absent), an agent-mode rollout over the scripted backend, and the hostile episode's targets
(a sentinel folder under /tmp, a TCP listener on 127.0.0.2 that records connections, secret
files in the home and under /srv, the project checkout, the check's own files)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import tempfile
import threading
import types
from pathlib import Path

import httpx
import pytest

from agentrl.agents.sandbox import find_bwrap
from agentrl.config import load_config
from agentrl.testing.rollout import call_text, prompts_batch


def cli_binary(env_var: str, name: str) -> str:
    """The CLI's path, or a skip that says how to install it."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the agent CLIs need it (scripts/setup_agent_clis.sh)")
    path = os.environ.get(env_var) or shutil.which(name)
    if not path or not Path(path).exists():
        pytest.skip(f"the {name} CLI was not found: set {env_var} or put {name} on PATH "
                    "(scripts/setup_agent_clis.sh)")
    return path


@pytest.fixture
def tmp_path():
    """A short folder per test, in place of pytest's own: an episode's gateway socket lives
    in the episode folder the tests make under it, and a unix socket's path holds at most
    107 bytes (pytest's tmp_path under an xdist worker, /tmp/pytest-of-USER/pytest-N/
    popen-gwK/TEST_NAME0/, leaves too little of them)."""
    path = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def bwrap() -> str:
    path = find_bwrap()
    if path is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap, or AGENTRL_BWRAP)")
    return path


def shell_call(tool: str, key: str, command: str) -> str:
    """An assistant text calling the CLI's shell tool (Bash/command, exec_command/cmd)."""
    return call_text(tool, "").replace('{"text": ""}', json.dumps({key: command}))


def agent_rollout(agent_fn, replies: list[str], tokenizer, extra_info: list[dict]):
    """(the rollout's output, the backend): one sample per ``extra_info`` through agent mode
    with the scripted policy answering every trajectory with ``replies``."""
    from agentrl.gateway.agent_rollout import AgentRollout
    from agentrl.rollout.backends.scripted import ScriptedBackend

    rollout = load_config(overrides=[
        "data.max_prompt_length=14336", "data.max_response_length=2048",
        "actor_rollout_ref.rollout.agent_timeout=120",
        "actor_rollout_ref.rollout.agent_client=anthropic",
        "actor_rollout_ref.rollout.multi_turn.enable=false",
    ]).actor_rollout_ref.rollout
    backend = ScriptedBackend(replies, tokenizer)
    engine = AgentRollout(rollout, tokenizer, backend, agent_fn)
    batch = prompts_batch(len(extra_info), extra_info=extra_info)
    return asyncio.run(engine.agenerate_sequences(batch)), backend


class Listener:
    """A TCP listener on 127.0.0.2 (not the gateway) that counts connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.2", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


SECRET = "TOPSECRET-31337"  # in files the policy must not read
HIDDEN = "HIDDEN-ANSWER-7731"  # in the check's own file
CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hostile_targets():
    """(a sentinel folder under /tmp with a file, a listener on 127.0.0.2, secret files in
    the home and under /srv); checked by the test, removed afterwards."""
    sentinel = Path(tempfile.mkdtemp(prefix="agentrl-sentinel-", dir="/tmp"))
    (sentinel / "keep.txt").write_text("still here")
    listener = Listener()
    secrets = [Path(tempfile.mkdtemp(prefix=".agentrl-secret-", dir=Path.home())) / "key"]
    if os.access("/srv", os.W_OK):
        secrets.append(Path(tempfile.mkdtemp(prefix="agentrl-secret-", dir="/srv")) / "key")
    for secret in secrets:
        secret.write_text(SECRET + "\n")
    yield sentinel, listener, secrets
    listener.close()
    shutil.rmtree(sentinel, ignore_errors=True)
    for secret in secrets:
        shutil.rmtree(secret.parent, ignore_errors=True)


def hostile_row(check: dict) -> dict:
    """``check``'s row with a check file the policy will try to read and forge."""
    return {**check, "check_files": {"hidden.txt": HIDDEN + "\n"},
            "check": f"{check['check']} && grep -qx {HIDDEN} hidden.txt"}


def hostile_command(sentinel: Path, port: int, secrets: list[Path], rm: str = "rm") -> str:
    """A policy's shell command that deletes outside its workspace (``rm -rf``; ``rm`` may be
    spelled so the CLI's own filter does not see it), reaches another address, reads the
    secrets, the project checkout and the check's file and forges the latter, then writes
    the answer the check wants in the workspace."""
    connect = (f"python3 -c \"import socket; socket.create_connection(('127.0.0.2', {port}), 3)\""
               f" || echo python-connect-failed")
    reads = " ".join(str(p) for p in (*secrets, CHECKOUT / "pyproject.toml"))
    return (f"{rm} -rf {sentinel}; {connect}; curl -sS -m 3 http://127.0.0.2:{port}/ "
            f"|| echo curl-failed; cat {reads} hidden.txt 2>&1 | head -c 2000; "
            f"echo forged > hidden.txt; echo 42 > answer.txt")


def assert_contained(text: str) -> None:
    """What a hostile episode's trajectory must not hold, and the failures it must."""
    assert SECRET not in text and HIDDEN not in text
    assert "[build-system]" not in text and "[project]" not in text  # the checkout's file
    assert "No such file or directory" in text


def run_harness_episode(harness, task: dict, options) -> dict:
    """One episode of `harness` on `task`, its model client pointed at no gateway (the
    fake CLIs of these tests never call it)."""
    from agentrl.agents.harness import run_episode

    async def main():
        async with httpx.AsyncClient() as http:
            client = types.SimpleNamespace(_client=http, base_url="http://g/sessions/s/v1")
            return await run_episode(harness, task, client, options)
    return asyncio.run(main())
