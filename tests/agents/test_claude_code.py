"""Claude Code (``--bare``) as agent mode's function, run for real against the gateway with
the scripted policy, inside bubblewrap: the trained tokens are the policy's, the reward is
the workspace check's; a policy that deletes outside its workspace and connects to another
address changes nothing and reaches nothing, and one that reads secrets in the home and
under /srv, the project checkout and the check's file (then forges it) reads nothing and
still passes its check; the turn budget stops the CLI; an episode cancelled mid-command,
and a trainer.mode=async run killed or interrupted mid-command, leave none of the episodes'
processes behind."""

from __future__ import annotations

import pytest

from agentrl.agents import claude_code
from tests.agents.conftest import (
    LIMIT_OPTIONS,
    agent_rollout,
    assert_contained,
    assert_limits_held,
    assert_trained_async,
    cancel_mid_command,
    cli_binary,
    hostile_command,
    hostile_row,
    kill_async_run,
    run_limits_batch,
    shell_call,
    train_async,
)

pytestmark = pytest.mark.harness
CHECK = {"files": [{"path": "notes/a.txt", "content": "one\ntwo\n"}],
         "check": "test \"$(cat answer.txt)\" = 42 && test -f notes/a.txt"}


def _agent(**options):
    return claude_code.agent(binary=cli_binary("AGENTRL_CLAUDE_BIN", "claude"),
                             extra_args=("--bare",), sandbox="bwrap", **options)


def _trained(out, row: int) -> list[int]:
    mask = out.batch["response_mask"][row].bool()
    return out.batch["responses"][row][mask].tolist()


def test_an_episode_is_token_exact_and_scored_by_the_check(tiny_tokenizer, bwrap):
    replies = [shell_call("Bash", "command", "wc -l < notes/a.txt; echo 42 > answer.txt"),
               "done"]
    wrong = [shell_call("Bash", "command", "echo 41 > answer.txt"), "done"]
    out, backend = agent_rollout(_agent(), replies, tiny_tokenizer, [CHECK])
    assert list(out.non_tensor_batch["request_state"]) == ["completed"]
    assert out.batch["rm_scores"][0].sum().item() == 1.0
    calls = [ids for rid, ids in backend.outputs if "~side" not in rid]
    assert len(calls) == 2 and _trained(out, 0) == calls[0] + calls[1]
    assert out.meta_info["metrics"]["gateway/forks"] == 0
    assert out.meta_info["metrics"]["gateway/side_calls"] == 0
    # the tool's output (2 lines in the row's file) is in the trajectory, untrained
    response = out.batch["responses"][0]
    untrained = response[~out.batch["response_mask"][0].bool()
                         & out.batch["attention_mask"][0, -response.shape[0]:].bool()]
    assert "2" in tiny_tokenizer.decode(untrained.tolist())
    out, _ = agent_rollout(_agent(), wrong, tiny_tokenizer, [CHECK])
    assert list(out.non_tensor_batch["request_state"]) == ["completed"]
    assert out.batch["rm_scores"][0].sum().item() == 0.0


def test_a_hostile_policy_gets_nothing_of_the_host_and_still_passes_its_check(
        tiny_tokenizer, bwrap, hostile_targets):
    """Two hostile episodes side by side (conftest.hostile_command): every reach is
    refused or lands in the cage, neither reads the other's folder, both pass the check."""
    replies = [shell_call("Bash", "command", hostile_command(hostile_targets)), "done"]
    results = []
    agent = _agent(ro_binds=(str(hostile_targets.sentinel),))

    async def recorded(task, client):
        results.append(await agent(task, client))
        return results[-1]

    rows = [hostile_row(CHECK, f"EPISODE-MARK-{k}") for k in range(2)]
    out, _ = agent_rollout(recorded, replies, tiny_tokenizer, rows)
    assert list(out.non_tensor_batch["request_state"]) == ["completed"] * 2
    for k in range(2):
        text = tiny_tokenizer.decode(out.batch["responses"][k].tolist())
        assert_contained(text, hostile_targets)
        assert f"EPISODE-MARK-{k}" in text and f"EPISODE-MARK-{1 - k}" not in text
    assert [r["score"] for r in results] == [1.0, 1.0]  # the workspace was writable
    assert out.batch["rm_scores"].sum().item() == 2.0


def test_a_fork_bomb_a_memory_hog_and_a_disk_filler_end_only_their_episodes(tiny_tokenizer,
                                                                           bwrap, cgroups):
    """Four episodes, one command (conftest.LIMIT_COMMAND): each writes its answer, then
    one forks without end, one allocates 4 GB, one fills its workspace, one stops there."""
    out, results, took = run_limits_batch(_agent(**LIMIT_OPTIONS), lambda c: shell_call("Bash", "command", c), tiny_tokenizer)
    assert_limits_held(out, results, took, tiny_tokenizer)


def test_the_turn_budget_stops_the_cli(tiny_tokenizer, bwrap):
    replies = [shell_call("Bash", "command", f"echo {k} >> log.txt") for k in range(4)] + ["done"]
    results = []
    agent = _agent(max_turns=2)

    async def recorded(task, client):
        results.append(await agent(task, client))
        return results[-1]

    out, backend = agent_rollout(recorded, replies, tiny_tokenizer,
                                 [{"check": "test $(wc -l < log.txt) = 2"}])
    assert results[0]["stopped"] == "turns" and results[0]["turns"] == 2
    assert results[0]["score"] == 1.0  # two commands ran, no third
    assert len([rid for rid, _ in backend.outputs if "~side" not in rid]) == 2


def test_a_cancelled_episode_leaves_no_process(tiny_tokenizer, tmp_path, bwrap):
    """Cancelled while its cage runs a 600-second command, its parent alive (the producer's
    stop): no claude, bridge, bwrap or command of the episode is left, nor its folder."""
    root = tmp_path / "episodes"
    assert cancel_mid_command(_agent(root=str(root)), shell_call("Bash", "command", "sleep 601"),
                              tiny_tokenizer, CHECK, root, "sleep 601") == []
    assert list(root.iterdir()) == []


def _async_env() -> dict[str, str]:
    """``--tools Bash``: a first call of ~1.3k prompt tokens instead of ~4.2k, which the
    tiny model's one server thread pays for."""
    return {"AGENTRL_CLAUDE_BIN": cli_binary("AGENTRL_CLAUDE_BIN", "claude"),
            "AGENTRL_CLAUDE_ARGS": "--bare --tools Bash"}


@pytest.mark.slow
def test_two_async_steps_version_every_token_and_leave_no_process(
        make_config, short_prompts, tmp_path, monkeypatch, bwrap):
    """agentrl.agents.claude_code.run as the agent function, trainer.mode=async: the
    producer's process runs the CLI episodes in their cages."""
    assert_trained_async(*train_async(make_config, short_prompts, tmp_path, monkeypatch,
                                      "claude_code", _async_env()))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill", "kill_trainer", "interrupt"])
def test_a_run_stopped_mid_command_leaves_no_process(how, tiny_model_dir, short_prompts,
                                                     tmp_path, bwrap):
    """``agentrl train`` (async, Claude Code, the scripted policy) SIGKILLed as a process
    group or alone, or interrupted, while its episodes' cages run a 600-second command (the
    CLI's Bash tool waits up to 120 s by default): within 15 s of the trainer's end no
    claude, bridge, bwrap or command of the run is left. An
    interrupted run has removed its episodes' folders too (a killed one leaves them)."""
    replies = [shell_call("Bash", "command", "sleep 601"), "done"]
    left, folders, log = kill_async_run(tiny_model_dir, short_prompts, tmp_path, "claude_code",
                                        _async_env(), replies, "sleep 601", how)
    assert left == [], "\n".join(log)
    if how == "interrupt":  # a run that shut down removed its episodes' folders too
        assert folders == []
