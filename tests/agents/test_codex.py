"""The Codex CLI as agent mode's function, run for real against the gateway with the
scripted policy, inside bubblewrap: token-exact, scored by the workspace check; a hostile
policy (conftest.hostile_command) reaches none of the host's files (home, /srv, dataset,
checkpoint, checkout), its environment, the check's file, another episode's folder, another
address or the gateway outside its session, leaves no daemon, and still passes its check;
a fork bomb, a memory hog and a disk filler end their own episodes only."""

from __future__ import annotations

import pytest

from agentrl.agents import codex
from tests.agents.conftest import (
    LIMIT_OPTIONS,
    agent_rollout,
    assert_contained,
    assert_limits_held,
    cli_binary,
    hostile_command,
    hostile_row,
    run_limits_batch,
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


def test_a_hostile_policy_gets_nothing_of_the_host_and_still_passes_its_check(
        tiny_tokenizer, bwrap, hostile_targets):
    """Two hostile episodes side by side (conftest.hostile_command): every reach is
    refused or lands in the cage, neither reads the other's folder, both pass the check."""
    # Codex itself refuses a command it sees as `rm -rf`: spelled `x=rm; $x -rf`, it runs
    command = hostile_command(hostile_targets, rm="x=rm; $x")
    replies = [shell_call("exec_command", "cmd", command), "done"]
    rows = [hostile_row(CHECK, f"EPISODE-MARK-{k}") for k in range(2)]
    out, _ = agent_rollout(_agent(ro_binds=(str(hostile_targets.sentinel),)), replies,
                           tiny_tokenizer, rows)
    assert list(out.non_tensor_batch["request_state"]) == ["completed"] * 2
    for k in range(2):
        text = tiny_tokenizer.decode(out.batch["responses"][k].tolist())
        assert_contained(text, hostile_targets)
        assert f"EPISODE-MARK-{k}" in text and f"EPISODE-MARK-{1 - k}" not in text
    assert out.batch["rm_scores"].sum().item() == 2.0  # both checks passed


def test_a_fork_bomb_a_memory_hog_and_a_disk_filler_end_only_their_episodes(tiny_tokenizer,
                                                                           bwrap, cgroups):
    """Four episodes, one command (conftest.LIMIT_COMMAND): each writes its answer, then
    one forks without end, one allocates 4 GB, one fills its workspace, one stops there."""
    out, results, took = run_limits_batch(_agent(**LIMIT_OPTIONS), lambda c: shell_call("exec_command", "cmd", c), tiny_tokenizer)
    assert_limits_held(out, results, took, tiny_tokenizer)


def test_the_subagent_tools_are_off_unless_the_extra_arguments_enable_them(tmp_path):
    def flags(extra: list[str]) -> list[str]:
        command = codex.CODEX.command("codex", "task", tmp_path, extra)
        return [command[i + 1] for i, arg in enumerate(command) if arg == "--disable"]

    assert "multi_agent" in flags([])  # the multi_agent_v1 group is not sent by default
    enabled = flags(["--enable", "multi_agent"])
    assert "multi_agent" not in enabled and "plugins" in enabled
