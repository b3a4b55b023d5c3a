"""The gateway's session tree: a rewritten history starts a segment that records its parent
and where it leaves the parent's history (message and token), with every call's tokens, loss
mask, log-probs and policy versions."""

from __future__ import annotations

from agentrl.gateway.sessions import Session, comparable_message
from agentrl.models.chat import ChatRenderer


def _call(session, renderer, messages, reply, version):
    """One model call as the gateway records it: prepare, the model's ids, the reply."""
    segment = session.prepare(renderer, messages, [])
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
