"""Session trees made by the real CLIs (issue 54 item 2): Claude Code running a subagent
(its Agent tool) and compacting its context, Codex compacting its context, each one episode
in agent mode over the scripted policy, inside bubblewrap. The recorded tree has the
structure the CLI made (the subagent a child of the calling segment after its call; the
summarisation call a fork of the thread; the compacted history a child of the thread it
replaces), every policy token trains exactly once with ``agent_segments: all``
(``agent/tokens_recorded == agent/tokens_trained``, each row's trained tokens exactly the
policy's outputs of its calls) and tool results and prompts never train.

What triggers each, offline (docs/agents.md, "Session trees of the real CLIs"):

- Claude Code's Agent tool exists only outside ``--bare``; ``--tools Bash,Agent``,
  ``--system-prompt`` and ``--agents`` (one small subagent type) keep the prompt small;
- Claude Code compacts on its own (not only after a prompt-too-long error) only when the
  auto-compact window is configured: ``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` (100k at least) and
  ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`` (the threshold in percent of it) through ``--settings``'
  ``env``; with 3.5 % (2,800 tokens) the tiny tokenizer's counts cross it once, after the
  third call, then the summarisation call (the history before the last turn, a summary
  request added) and the compacted history (a new system prompt, the summary, the last
  turn kept) arrive;
- Codex compacts past ``model_auto_compact_token_limit`` (``-c``): its summarisation call
  is the whole history, a checkpoint request added and no tools; the compacted history keeps
  the first messages and the tools.
- Codex's subagents are its ``multi_agent_v1`` tools (``--enable multi_agent``: the harness
  turns them off by default; ``spawn_agent``, then ``wait_agent`` on the id it returns;
  ``multi_agent_v2``, off by default in 0.171, is not exercised); the subagent runs beside the main thread, so the policy answers by
  thread (``ThreadPolicy``: the main thread's prompts hold the episode's task) rather than by
  call order.

Marked ``harness``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter

import pytest

from agentrl.agents import claude_code, codex
from agentrl.config import load_config
from agentrl.testing.rollout import call_text, prompts_batch
from tests.agents.conftest import cli_binary, shell_call

pytestmark = pytest.mark.harness
NOTE = {"check": "test \"$(cat note.txt)\" = from-sub"}
SUBAGENT_ARGS = ("--tools", "Bash,Agent", "--system-prompt", "You run shell commands.",
                 "--disable-slash-commands", "--agents", json.dumps({"helper": {
                     "description": "Runs one shell command",
                     "prompt": "You run the command you are given.", "tools": ["Bash"]}}))
COMPACT_ARGS = ("--bare", "--settings", json.dumps({"env": {
    "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "3.5"}}))


class ThreadPolicy:
    """The scripted policy per thread: a call whose prompt holds ``marker`` (the episode's
    task: only the main thread's prompts do) takes the next of ``main``'s replies, any other
    the next of ``sub``'s; a reply may be a function of the decoded prompt. ``outputs``:
    ``(thread, output ids)`` in call order."""

    weight_version = 0

    def __init__(self, main: list, sub: list, tokenizer, marker: str) -> None:
        from agentrl.rollout.backends.scripted import ScriptedBackend

        self.scripts = {"main": main, "sub": sub}
        self.tokenizer, self.marker = tokenizer, marker
        self.ids = ScriptedBackend(["-"], tokenizer)  # its reply -> output ids rule
        self.turns: Counter[str] = Counter()
        self.outputs: list[tuple[str, list[int]]] = []

    async def generate(self, input_ids, sampling_params, request_id):
        from agentrl.rollout.backends.base import GenerationOutput

        text = self.tokenizer.decode(input_ids)
        thread = "main" if self.marker in text else "sub"
        reply = self.scripts[thread][self.turns[thread]]
        self.turns[thread] += 1
        ids = self.ids.output_ids(reply(text) if callable(reply) else reply, sampling_params)
        self.outputs.append((thread, ids))
        return GenerationOutput(ids, self.tokenizer.decode(ids), "stop", [0.0] * len(ids),
                                meta_info={"weight_version": "0"})


def _rollout(agent_fn, backend, tokenizer, check: dict):
    """One episode through agent mode with every segment trained: the output, every row
    completed."""
    from agentrl.gateway.agent_rollout import AgentRollout
    from agentrl.gateway.agent_settings import AgentSettings

    rollout = load_config(overrides=[
        "data.max_prompt_length=32768", "data.max_response_length=8192",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40960",
        "actor_rollout_ref.rollout.agent_timeout=150",
        "actor_rollout_ref.rollout.agent_client=anthropic",
        "actor_rollout_ref.rollout.agent_segments=all",
        "actor_rollout_ref.rollout.multi_turn.enable=false",
    ]).actor_rollout_ref.rollout
    engine = AgentRollout(AgentSettings.from_config(rollout), tokenizer, backend, agent_fn)
    out = asyncio.run(engine.agenerate_sequences(prompts_batch(1, extra_info=[check])))
    assert set(out.non_tensor_batch["request_state"]) == {"completed"}  # every row
    return out


def _episode(agent_fn, replies: list[str], tokenizer, check: dict):
    """One episode over the scripted policy (replies in call order): (output, policy
    outputs in call order, the rows by segment index)."""
    from agentrl.rollout.backends.scripted import ScriptedBackend

    backend = ScriptedBackend(replies, tokenizer)
    out = _rollout(agent_fn, backend, tokenizer, check)
    calls = [ids for rid, ids in backend.outputs if "~side" not in rid]
    assert len(calls) == len(backend.outputs)  # no side call
    rows = {tree["index"]: i for i, tree in enumerate(out.non_tensor_batch["segment"])}
    return out, calls, rows


def _tool_call(name: str, arguments: dict) -> str:
    """An assistant text calling ``name`` with ``arguments`` (the policy's tool-call format)."""
    return call_text(name, "").replace('{"text": ""}', json.dumps(arguments))


def _trained(out, row: int) -> list[int]:
    return out.batch["responses"][row][out.batch["response_mask"][row].bool()].tolist()


def _untrained_text(out, row: int, tokenizer) -> str:
    response = out.batch["responses"][row]
    mask = ~out.batch["response_mask"][row].bool() \
        & out.batch["attention_mask"][row, -response.shape[0]:].bool()
    return tokenizer.decode(response[mask].tolist())


def _assert_every_policy_token_trains_once(out, calls: list[list[int]]) -> None:
    metrics = out.meta_info["metrics"]
    recorded = sum(len(ids) for ids in calls)
    assert metrics["agent/tokens_recorded"] == metrics["agent/tokens_trained"] == recorded
    assert metrics["gateway/side_calls"] == 0
    assert float(out.batch["rm_scores"].sum()) == 1.0  # the check passed, on one row


def test_claude_code_subagent_is_a_child_at_its_agent_call(tiny_tokenizer, bwrap):
    agent = claude_code.agent(binary=cli_binary("AGENTRL_CLAUDE_BIN", "claude"),
                              extra_args=SUBAGENT_ARGS, sandbox="bwrap")
    task = {"description": "write the note", "prompt": "echo from-sub | tee note.txt",
            "subagent_type": "helper"}
    replies = [_tool_call("Agent", task),                                # main
               shell_call("Bash", "command", "echo from-sub | tee note.txt"),  # subagent
               "sub done",                                                 # its answer
               "done"]                                                     # main again
    out, calls, rows = _episode(agent, replies, tiny_tokenizer, NOTE)
    assert len(calls) == 4 and sorted(rows) == [0, 1]
    main, sub = (out.non_tensor_batch["segment"][rows[k]] for k in (0, 1))
    assert (main["parent"], main["branch"], main["session_segments"]) == (None, None, 2)
    # the subagent: a child of the main thread after the assistant turn holding the call
    # (system, user, Claude Code's agent list as a system message, the call)
    assert (sub["parent"], sub["branch"], sub["branch_message"]) == (0, "spawn", 4)
    assert 0 < sub["branch_token"] < out.batch["prompts"].shape[1]
    assert out.meta_info["metrics"]["gateway/forks"] == 0  # a spawn is no rewrite
    # the main thread: its two calls, one segment, the reward row; the subagent: its two
    assert list(out.non_tensor_batch["episode_row"])[rows[0]] == 0
    assert _trained(out, rows[0]) == calls[0] + calls[3]
    assert _trained(out, rows[1]) == calls[1] + calls[2]
    assert "sub done" in _untrained_text(out, rows[0], tiny_tokenizer)  # the Agent result
    assert "from-sub" in _untrained_text(out, rows[1], tiny_tokenizer)  # the Bash result
    _assert_every_policy_token_trains_once(out, calls)


def test_claude_code_compaction_forks_and_restarts_from_the_thread(tiny_tokenizer, bwrap):
    agent = claude_code.agent(binary=cli_binary("AGENTRL_CLAUDE_BIN", "claude"),
                              extra_args=COMPACT_ARGS, sandbox="bwrap")
    replies = [shell_call("Bash", "command", "echo one"),
               shell_call("Bash", "command", "seq 1 300"),
               shell_call("Bash", "command", "echo from-sub > note.txt"),
               "SUMMARY-OF-THE-WORK",  # the summarisation call
               "done"]                 # the compacted history's call
    out, calls, rows = _episode(agent, replies, tiny_tokenizer, NOTE)
    assert len(calls) == 5 and sorted(rows) == [0, 1, 2]
    thread, summary, compacted = (out.non_tensor_batch["segment"][rows[k]] for k in (0, 1, 2))
    # the summarisation call: the history before the last turn (system, user, two
    # exchanges) and a summary request: a fork of the thread at message 6
    assert (summary["parent"], summary["branch"], summary["branch_message"]) == (0, "fork", 6)
    # the compacted history: a new system prompt (its billing line changed), the summary, the
    # thread's last turn kept: a child of the thread it replaces
    assert (compacted["parent"], compacted["branch"], compacted["branch_message"]) == (
        0, "fork", 0)
    assert list(out.non_tensor_batch["episode_row"])[rows[2]] == 0  # it ended the episode
    assert _trained(out, rows[0]) == calls[0] + calls[1] + calls[2]
    assert _trained(out, rows[1]) == calls[3]
    assert _trained(out, rows[2]) == calls[4]
    assert "SUMMARY-OF-THE-WORK" in tiny_tokenizer.decode(
        out.batch["prompts"][rows[2]].tolist())  # the summary, in a prompt: untrained
    assert "300" in _untrained_text(out, rows[0], tiny_tokenizer)
    assert out.meta_info["metrics"]["gateway/forks"] == 2
    _assert_every_policy_token_trains_once(out, calls)


def test_codex_compaction_forks_and_restarts_from_the_thread(tiny_tokenizer, bwrap):
    agent = codex.agent(binary=cli_binary("AGENTRL_CODEX_BIN", "codex"), sandbox="bwrap",
                        extra_args=("-c", "model_auto_compact_token_limit=14500"))
    replies = [shell_call("exec_command", "cmd", "echo one"),
               shell_call("exec_command", "cmd", "seq 1 600"),
               shell_call("exec_command", "cmd", "echo from-sub > note.txt"),
               "SUMMARY-OF-THE-WORK",
               "done"]
    out, calls, rows = _episode(agent, replies, tiny_tokenizer, NOTE)
    assert len(calls) == 5 and sorted(rows) == [0, 1, 2]
    thread, summary, compacted = (out.non_tensor_batch["segment"][rows[k]] for k in (0, 1, 2))
    # the summarisation call: every message of the thread, the last result and a checkpoint
    # request, no tools: a fork at the thread's whole history
    assert (summary["parent"], summary["branch"]) == (0, "fork")
    assert summary["branch_message"] >= 9
    # the compacted history keeps the first messages (instructions, environment, task) and
    # the tools: a child of the thread, not of the tool-less summarisation
    assert (compacted["parent"], compacted["branch"]) == (0, "fork")
    assert 0 < compacted["branch_message"] < summary["branch_message"]
    assert list(out.non_tensor_batch["episode_row"])[rows[2]] == 0
    assert _trained(out, rows[0]) == calls[0] + calls[1] + calls[2]
    assert _trained(out, rows[1]) == calls[3]
    assert _trained(out, rows[2]) == calls[4]
    assert "SUMMARY-OF-THE-WORK" in tiny_tokenizer.decode(
        out.batch["prompts"][rows[2]].tolist())
    _assert_every_policy_token_trains_once(out, calls)


def test_codex_subagent_is_a_child_at_its_spawn_agent_call(tiny_tokenizer, bwrap):
    agent = codex.agent(binary=cli_binary("AGENTRL_CODEX_BIN", "codex"), sandbox="bwrap",
                        extra_args=("--enable", "multi_agent"))  # off by default

    def wait(prompt: str) -> str:  # wait for the agent whose id spawn_agent returned
        agent_id = re.search(r'agent_id[\\"]*:[\\"]*([0-9a-f-]{36})', prompt)[1]
        return _tool_call("wait_agent", {"targets": [agent_id], "timeout_ms": 60000})

    policy = ThreadPolicy(
        main=[_tool_call("spawn_agent", {"message": "echo from-sub | tee note.txt"}), wait,
              "done"],
        sub=[shell_call("exec_command", "cmd", "echo from-sub | tee note.txt"), "sub done"],
        tokenizer=tiny_tokenizer, marker="Question conv-0?")
    out = _rollout(agent, policy, tiny_tokenizer, NOTE)
    threads = [thread for thread, _ in policy.outputs]
    assert sorted(threads) == ["main"] * 3 + ["sub"] * 2
    rows = {tree["index"]: i for i, tree in enumerate(out.non_tensor_batch["segment"])}
    assert sorted(rows) == [0, 1]
    main, sub = (out.non_tensor_batch["segment"][rows[k]] for k in (0, 1))
    assert (main["parent"], main["branch"]) == (None, None)
    # a child of the main thread, after the assistant turn holding spawn_agent (two
    # developer messages, the environment, the task, that turn), though it shares the
    # first three messages with it
    assert (sub["parent"], sub["branch"], sub["branch_message"]) == (0, "spawn", 5)
    prompt = tiny_tokenizer.decode(out.batch["prompts"][rows[0]].tolist())
    assert "spawn_agent" in prompt  # the group's tools are offered
    assert list(out.non_tensor_batch["episode_row"])[rows[0]] == 0
    assert _trained(out, rows[0]) == [t for th, ids in policy.outputs if th == "main"
                                      for t in ids]
    assert _trained(out, rows[1]) == [t for th, ids in policy.outputs if th == "sub"
                                      for t in ids]
    assert "from-sub" in _untrained_text(out, rows[1], tiny_tokenizer)
    _assert_every_policy_token_trains_once(out, [ids for _, ids in policy.outputs])
    assert out.meta_info["metrics"]["gateway/forks"] == 0
