"""The Codex CLI as agent mode's function, run for real against the gateway with the
scripted policy, inside bubblewrap: token-exact, scored by the workspace check; a hostile
policy (conftest.hostile_command) reaches none of the host's files (home, /srv, dataset,
checkpoint, checkout), its environment, the check's file, another episode's folder, another
address or the gateway outside its session, leaves no daemon, and still passes its check;
a fork bomb, a memory hog and a disk filler end their own episodes only; trainer.mode=async
runs (partial episodes under the scripted policy); an episode cancelled mid-command, and an
async run killed or interrupted mid-command, leave none of the episodes' processes behind."""

from __future__ import annotations

import json
import shlex
from collections import Counter

import pytest

from agentrl.agents import codex
from agentrl.testing.rollout import call_text
from tests.agents.conftest import (
    LIMIT_OPTIONS,
    agent_rollout,
    assert_contained,
    assert_limits_held,
    assert_trained_async,
    cancel_mid_command,
    cli_binary,
    episode_processes,
    hostile_command,
    hostile_row,
    kill_async_run,
    run_limits_batch,
    shell_call,
    train_async,
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


ASYNC_ARGS = shlex.join([  # its own ~20k-character instructions out: ~4.9k prompt tokens
    "-c", 'instructions="You run shell commands."', "-c", "include_permissions_instructions=false",
    "-c", "include_environment_context=false", "-c", "include_apps_instructions=false",
    "-c", "include_collaboration_mode_instructions=false"])


def _async_env() -> dict[str, str]:
    return {"AGENTRL_CODEX_BIN": cli_binary("AGENTRL_CODEX_BIN", "codex"),
            "AGENTRL_CODEX_ARGS": ASYNC_ARGS}


@pytest.mark.slow
def test_two_async_steps_version_every_token_and_leave_no_process(
        make_config, short_prompts, tmp_path, monkeypatch, bwrap):
    """agentrl.agents.codex.run as the agent function, trainer.mode=async, the canary on:
    the producer's process runs the Codex episodes in their cages against the tiny model's
    server. Codex asks for no output limit, so each call stops at the trajectory's budget
    and every token the sessions recorded trains."""
    history, rows, root = train_async(make_config, short_prompts, tmp_path, monkeypatch,
                                      "codex", _async_env())
    assert_trained_async(history, rows, root)
    assert all(m["agent/tokens_recorded"] == m["agent/tokens_trained"] for m in history)


def _exec(command: str) -> str:
    """A call of exec_command that waits up to 30 s for ``command`` (Codex's default: 10)."""
    return call_text("exec_command", "").replace(
        '{"text": ""}', json.dumps({"cmd": command, "yield_time_ms": 30000}))


@pytest.mark.slow
def test_scripted_async_steps_train_every_call_across_weight_updates(
        make_config, short_prompts, tmp_path, monkeypatch, tiny_tokenizer, bwrap):
    """The scripted policy behind servers of its own (tests/fixtures/scripted_servers.py),
    three async steps: each Codex episode runs a 20-second command between its two calls, so
    the third batch's episodes (started after the first sync) make their second call after
    the second: partial episodes, their tokens of two versions. Every trained token is one
    the policy answered (two calls' worth per episode, nothing else)."""
    replies = [_exec("sleep 20; echo 42 > answer.txt"), "done"]
    history, rows, root = train_async(make_config, short_prompts, tmp_path, monkeypatch,
                                      "codex", _async_env(), steps=3, replies=replies)
    per_episode = sum(len(tiny_tokenizer.encode(r, add_special_tokens=False)) + 1
                      for r in replies)  # each call's text and the stop token
    assert [m["training/global_step"] for m in history] == [1.0, 2.0, 3.0]
    assert all(m["rollout/agent_errors"] == 0 for m in history)
    assert [m["agent/tokens_recorded"] for m in history] == [2.0 * per_episode] * 3
    assert [m["agent/tokens_trained"] for m in history] == [2.0 * per_episode] * 3
    assert sorted(Counter(row["uid"] for row in rows).values()) == [2] * 3
    assert all(row["step"] - 1 - min(row["policy_versions"]) <= 1 for row in rows)
    partial = [row for row in rows if len(set(row["policy_versions"])) > 1]
    assert partial and sum(m["async/partial_episodes"] for m in history) == len(partial)
    assert {row["step"] for row in partial} >= {3}
    assert episode_processes(root) == []
    assert not root.exists() or list(root.iterdir()) == []


def test_a_cancelled_episode_leaves_no_process(tiny_tokenizer, tmp_path, bwrap):
    """Cancelled while its cage runs a 600-second command, its parent alive (the producer's
    stop): no codex, bridge, bwrap or command of the episode is left, nor its folder."""
    root = tmp_path / "episodes"
    assert cancel_mid_command(_agent(root=str(root)), _exec("sleep 601"), tiny_tokenizer,
                              CHECK, root, "sleep 601") == []
    assert list(root.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill", "interrupt"])
def test_a_run_stopped_mid_command_leaves_no_process(how, tiny_model_dir, short_prompts,
                                                     tmp_path, bwrap):
    """``agentrl train`` (async, Codex, the scripted policy) SIGKILLed as a process group,
    or interrupted, while its episodes' cages run a 600-second command the CLI waits on for
    30 s: within 15 s of the trainer's end no codex, bridge, bwrap or command of the run is
    left (what a CLI that notices its gateway gone does by itself comes later). An
    interrupted run has removed its episodes' folders too (a killed one leaves them)."""
    left, folders, log = kill_async_run(tiny_model_dir, short_prompts, tmp_path, "codex",
                                        _async_env(), [_exec("sleep 601"), "done"],
                                        "sleep 601", how)
    assert left == [], "\n".join(log)
    if how == "interrupt":  # a run that shut down removed its episodes' folders too
        assert folders == []
