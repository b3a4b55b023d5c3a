"""The Codex CLI as agent mode's function, run for real against the gateway with the
scripted policy, inside bubblewrap: token-exact, scored by the workspace check, and a
hostile policy reaches neither the host's files (home, /srv, the project checkout) nor
the check's file nor another address, and still passes its check."""

from __future__ import annotations

import pytest

from agentrl.agents import codex
from tests.agents.conftest import (
    agent_rollout,
    assert_contained,
    cli_binary,
    hostile_command,
    hostile_row,
    shell_call,
)

pytestmark = pytest.mark.harness
CHECK = {"check": "test \"$(cat answer.txt)\" = 42"}


def _agent(**options):
    return codex.agent(binary=cli_binary("AGENTRL_CODEX_BIN", "codex"), sandbox="bwrap",
                       **options)


def test_an_episode_is_token_exact_and_scored_by_the_check(tiny_tokenizer, bwrap):
    replies = [shell_call("exec_command", "cmd", "echo 42 > answer.txt"), "done"]
    out, backend = agent_rollout(_agent(), replies, tiny_tokenizer, [CHECK])
    assert list(out.non_tensor_batch["request_state"]) == ["completed"]
    assert out.batch["rm_scores"][0].sum().item() == 1.0
    calls = [ids for rid, ids in backend.outputs if "~side" not in rid]
    mask = out.batch["response_mask"][0].bool()
    assert len(calls) == 2 and out.batch["responses"][0][mask].tolist() == calls[0] + calls[1]
    assert out.meta_info["metrics"]["gateway/forks"] == 0


def test_the_sandbox_keeps_the_host_and_the_network_out_of_reach(tiny_tokenizer, bwrap,
                                                                 hostile_targets):
    sentinel, listener, secrets = hostile_targets
    # Codex itself refuses a command it sees as `rm -rf`: spelled `x=rm; $x -rf`, it runs
    rm = hostile_command(sentinel, listener.port, secrets, rm="x=rm; $x")
    replies = [shell_call("exec_command", "cmd", rm), "done"]
    out, _ = agent_rollout(_agent(ro_binds=(str(sentinel),)), replies, tiny_tokenizer,
                           [hostile_row(CHECK)])
    assert (sentinel / "keep.txt").read_text() == "still here"
    assert listener.connections == 0
    text = tiny_tokenizer.decode(out.batch["responses"][0].tolist())
    assert "python-connect-failed" in text and "curl-failed" in text
    assert "Read-only file system" in text
    assert_contained(text)
    assert out.batch["rm_scores"][0].sum().item() == 1.0
