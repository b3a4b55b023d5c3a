"""The gateway's session tree: a rewritten history starts a segment that records its parent
and where it leaves the parent's history (message and token), with every call's tokens, loss
mask, log-probs and policy versions."""

from __future__ import annotations

import json

from agentrl.gateway.sessions import SPAWN_TOOLS, Session, comparable_message
from agentrl.models.chat import ChatRenderer


def _call(session, renderer, messages, reply, version, tools=()):
    """One model call as the gateway records it: prepare, the model's ids, the reply."""
    segment = session.prepare(renderer, messages, list(tools))
    ids = renderer.encode(reply + "<|im_end|>")
    segment.add_model_output(renderer, ids, [-0.5] * len(ids), version)
    segment.messages = [*segment.messages,
                        comparable_message({"role": "assistant", "content": reply})]
    return segment, ids


def test_a_dropped_turn_branches_from_its_parent_at_the_kept_prefix(tiny_tokenizer):
    renderer = ChatRenderer(tiny_tokenizer, {})
    session = Session("s")
    system = {"role": "system", "content": "You add numbers."}
    turn1 = [system, {"role": "user", "content": "1+1?"}]
    first, ids1 = _call(session, renderer, turn1, "2", version=3)
    turn2 = [*turn1, {"role": "assistant", "content": "2"}, {"role": "user", "content": "2+2?"}]
    same, ids2 = _call(session, renderer, turn2, "4", version=4)
    assert same is first and len(session.segments) == 1  # an extension, not a fork
    # the agent drops the first exchange: a new segment, child of the first, at message 1
    turn3 = [system, {"role": "user", "content": "3+3?"}]
    second, ids3 = _call(session, renderer, turn3, "6", version=5)
    assert len(session.segments) == 2 and session.rewrites == 1
    assert (first.parent, second.parent) == (None, 0)
    assert second.branch_message == 1  # the system message is kept
    shared = 0
    while first.input_ids[shared] == second.input_ids[shared]:
        shared += 1
    assert second.branch_token == shared > 0
    assert first.input_ids[:shared] == second.input_ids[:shared]
    # every policy token is in exactly one segment, with its log-prob and version
    assert first.policy_tokens + second.policy_tokens == len(ids1) + len(ids2) + len(ids3)
    trained = [t for t, m in zip(first.input_ids, first.loss_mask, strict=True) if m]
    assert trained == ids1 + ids2
    versions = [v for v, m in zip(first.weight_versions, first.loss_mask, strict=True) if m]
    assert versions == [3] * len(ids1) + [4] * len(ids2)
    assert [p for p, m in zip(second.rollout_log_probs, second.loss_mask, strict=True) if m] \
        == [-0.5] * len(ids3)
    record = session.as_dict()["trajectories"][1]
    assert (record["parent"], record["branch_message"], record["branch_token"]) == (0, 1, shared)
    assert record["weight_versions"] == second.weight_versions


def test_a_fork_picks_the_segment_it_shares_most_with(tiny_tokenizer):
    renderer = ChatRenderer(tiny_tokenizer, {})
    session = Session("s")
    a = [{"role": "user", "content": "task A"}]
    _call(session, renderer, a, "a", version=0)
    b = [{"role": "user", "content": "task B"}]
    _call(session, renderer, b, "b", version=0)  # forks from 0 at message 0
    b2 = [*b, {"role": "assistant", "content": "x"}]  # edits B's reply: shares 1 with seg 1
    _call(session, renderer, [*b2, {"role": "user", "content": "more"}], "c", version=0)
    assert [s.parent for s in session.segments] == [None, 0, 1]
    assert [s.branch_message for s in session.segments] == [0, 0, 1]


def test_side_calls_have_no_parent(tiny_tokenizer):
    renderer = ChatRenderer(tiny_tokenizer, {})
    session = Session("s")
    _call(session, renderer, [{"role": "user", "content": "task"}], "a", version=0)
    side = session.prepare(renderer, [{"role": "user", "content": "title?"}], [], side=True)
    assert side.parent is None and session.side == [side] and len(session.segments) == 1


def _spawn_call(session, renderer, messages, tools, name, task, call_id):
    """A call answered with one tool call (``name`` with ``task`` as its SPAWN_TOOLS
    argument, ``command`` for other tools): the segment, the model's ids and the assistant
    message the agent resends."""
    segment = session.prepare(renderer, messages, tools)
    ids = renderer.encode(f"spawn {call_id}<|im_end|>")
    segment.add_model_output(renderer, ids, [-0.5] * len(ids), 0)
    key = SPAWN_TOOLS.get(name, "command")
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": name, "arguments": json.dumps({key: task})}}]}
    segment.messages = [*segment.messages, comparable_message(reply)]
    return segment, ids, reply


def _tools(*names):
    return [{"type": "function", "function": {"name": n, "description": "", "parameters": {
        "type": "object", "properties": {}}}} for n in names]


def test_a_subagent_is_a_child_at_its_call_and_the_caller_goes_on_in_its_segment(
        tiny_tokenizer):
    """The Claude Code shape: the main thread calls Agent, the subagent's calls (its own
    system prompt and tools) come while it waits, then the main thread resumes."""
    renderer = ChatRenderer(tiny_tokenizer, {})
    session = Session("s")
    main = [{"role": "system", "content": "You lead."}, {"role": "user", "content": "Do it."}]
    lead, ids0, reply = _spawn_call(session, renderer, main, _tools("Agent", "Bash"), "Agent",
                                    "count the files", "call_1")
    sub_messages = [{"role": "system", "content": "You help."},
                    {"role": "user", "content": "<reminder/>\ncount the files"}]
    sub, ids1 = _call(session, renderer, sub_messages, "3 files", version=0)
    resumed = [*main, reply, {"role": "tool", "tool_call_id": "call_1", "content": "3 files"}]
    again, ids2 = _call(session, renderer, resumed, "done", 0, _tools("Agent", "Bash"))
    assert again is lead and len(session.segments) == 2 and session.rewrites == 0
    assert (sub.parent, sub.branch, sub.branch_message) == (0, "spawn", 3)  # after the call
    assert sub.branch_token == _shared(lead.input_ids, sub.input_ids)
    assert session.final_segment is lead  # the thread that ended the episode
    assert lead.policy_tokens + sub.policy_tokens == len(ids0) + len(ids1) + len(ids2)
    record = session.as_dict()["trajectories"]
    assert [(r["parent"], r["branch"]) for r in record] == [(None, None), (0, "spawn")]


def test_parallel_subagents_take_one_call_each(tiny_tokenizer):
    """Codex's spawn_agent, twice in one turn: each subagent is a child at that turn, and a
    third new conversation with no call left for it is a fork."""
    renderer = ChatRenderer(tiny_tokenizer, {})
    session = Session("s")
    main = [{"role": "user", "content": "Split the work."}]
    segment = session.prepare(renderer, main, _tools("spawn_agent"))
    ids = renderer.encode("two<|im_end|>")
    segment.add_model_output(renderer, ids, [0.0] * len(ids), 0)
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{k}", "type": "function", "function": {
            "name": "spawn_agent", "arguments": json.dumps({"message": f"part {k}"})}}
        for k in (1, 2)]}
    segment.messages = [*segment.messages, comparable_message(reply)]
    first, _ = _call(session, renderer, [{"role": "user", "content": "part 1"}], "a", 0)
    second, _ = _call(session, renderer, [{"role": "user", "content": "part 2"}], "b", 0)
    third, _ = _call(session, renderer, [{"role": "user", "content": "part 1"}], "c", 0)
    assert [(s.parent, s.branch, s.branch_message) for s in session.segments] == [
        (None, None, 0), (0, "spawn", 2), (0, "spawn", 2), (1, "fork", 1)]
    assert (first.branch, second.branch, third.branch) == ("spawn", "spawn", "fork")
    assert session.rewrites == 1


def test_a_compacted_history_is_a_child_of_the_thread_it_replaces(tiny_tokenizer):
    """The Claude Code shape: the summarisation call forks the history before its last
    turn; the compacted history (a new system prompt, the summary, the last turn kept)
    shares no message with either, and carries the main thread's last turn."""
    renderer = ChatRenderer(tiny_tokenizer, {})
    session = Session("s")
    tools = _tools("Bash")
    turn = [{"role": "system", "content": "v1"}, {"role": "user", "content": "go"}]
    main, _, call_a = _spawn_call(session, renderer, turn, tools, "Bash", "x", "a")
    result_a = {"role": "tool", "tool_call_id": "a", "content": "out a"}
    main2, _, call_b = _spawn_call(session, renderer, [*turn, call_a, result_a], tools, "Bash",
                                   "y", "b")
    assert main2 is main
    summarise = [*turn, call_a, result_a, {"role": "user", "content": "Summarise."}]
    summary, _ = _call(session, renderer, summarise, "SUMMARY", 0, tools)
    compacted = [{"role": "system", "content": "v2"}, {"role": "user", "content": "SUMMARY"},
                 call_b, {"role": "tool", "tool_call_id": "b", "content": "out b"}]
    after, _ = _call(session, renderer, compacted, "done", 0, tools)
    assert (summary.parent, summary.branch, summary.branch_message) == (0, "fork", 4)
    assert (after.parent, after.branch, after.branch_message) == (0, "fork", 0)
    assert session.final_segment is after


def test_a_fork_tie_goes_to_the_segment_with_the_same_tools(tiny_tokenizer):
    """The Codex shape: the summarisation call drops the tools; the compacted history keeps
    the first messages and the tools, so it is a child of the tool-using thread."""
    renderer = ChatRenderer(tiny_tokenizer, {})
    session = Session("s")
    tools = _tools("exec_command")
    turn = [{"role": "system", "content": "rules"}, {"role": "user", "content": "go"}]
    segment = session.prepare(renderer, turn, tools)
    segment.add_model_output(renderer, renderer.encode("ok<|im_end|>"), None, 0)
    segment.messages = [*segment.messages, comparable_message(
        {"role": "assistant", "content": "ok"})]
    summarise = [*turn, {"role": "assistant", "content": "ok"},
                 {"role": "user", "content": "Summarise."}]
    summary = session.prepare(renderer, summarise, [])
    assert (summary.parent, summary.branch_message) == (0, 3)
    summary.add_model_output(renderer, renderer.encode("S<|im_end|>"), None, 0)
    summary.messages = [*summary.messages, comparable_message(
        {"role": "assistant", "content": "S"})]
    compacted = session.prepare(renderer, [*turn, {"role": "user", "content": "S"}], tools)
    assert (compacted.parent, compacted.branch, compacted.branch_message) == (0, "fork", 2)
    assert session.rewrites == 2


def _shared(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))
