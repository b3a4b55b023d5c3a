"""Agent rollout mode: a user's agent function per sample, through the in-process gateway;
a function that raises, hangs or never calls the model fails only its sample."""

from __future__ import annotations

import asyncio
import re

import torch

from agentrl.gateway.agent_rollout import AgentRollout
from agentrl.gateway.agent_settings import AgentSettings
from agentrl.testing.rollout import (
    ConversationScriptBackend,
    call_text,
    prompts_batch,
    rollout_config,
)

SCRIPTS = {0: [call_text("calculator", "6*7") + "<|im_end|>", "It is 42.<|im_end|>"],
           1: ["x<|im_end|>"], 2: ["y<|im_end|>"], 3: ["z<|im_end|>"]}
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "calc",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                   "required": ["text"]}}}


def _settings(*overrides):
    return AgentSettings.from_config(rollout_config(*overrides))


async def agent(task, client):
    k = int(re.search(r"conv-(\d+)", task["raw_prompt"][0]["content"]).group(1))
    if k == 1:
        raise RuntimeError("tool server down")
    if k == 2:
        await asyncio.sleep(60)
    if k == 3:
        return 1.0  # never calls the model
    messages = list(task["raw_prompt"])
    reply = await client.chat.completions.create(model="policy", messages=messages,
                                                 tools=[CALCULATOR])
    call = reply.choices[0].message.tool_calls[0]
    messages += [reply.choices[0].message,
                 {"role": "tool", "tool_call_id": call.id, "content": "42"}]
    final = await client.chat.completions.create(model="policy", messages=messages,
                                                 tools=[CALCULATOR])
    return {"score": 1.0 if "42" in final.choices[0].message.content else 0.0}


def test_agent_functions_become_trajectories_and_faults_fail_only_their_sample(tiny_tokenizer):
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
    rollout = AgentRollout(_settings("agent_timeout=1"), tiny_tokenizer, backend, agent)
    out = asyncio.run(rollout.agenerate_sequences(prompts_batch(4)))
    states = list(out.non_tensor_batch["request_state"])
    assert states == ["completed", "failed", "failed", "failed"]
    metrics = out.meta_info["metrics"]
    assert metrics["rollout/agent_errors"] == 3 and metrics["rollout/agent_rewrites"] == 0
    # row 0: the model's exact tokens are the trained ones, the tool response masked out
    outputs = [ids for (k, _), calls in backend.outputs.items() if k == 0 for ids in calls]
    mask = out.batch["response_mask"][0].bool()
    assert out.batch["responses"][0][mask].tolist() == outputs[0] + outputs[1]
    assert "42" in tiny_tokenizer.decode(out.batch["responses"][0][~mask & (
        out.batch["attention_mask"][0, -mask.shape[0]:].bool())].tolist())
    # the reward sits on the last response token; failed samples train nothing
    assert out.batch["rm_scores"][0].sum() == 1.0 and torch.count_nonzero(
        out.batch["rm_scores"][1:]) == 0
    assert out.batch["response_mask"][1:].sum() == 0
    # each episode's session, and the lock that went with it, is gone once it is collected
    assert rollout.app.state.sessions == {}


def test_a_cancelled_episode_releases_its_session(tiny_tokenizer):
    """The off-policy producer cancels the episodes in flight when it stops: each one's
    session (and tool instances) go, not only those that ended."""
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
    called = asyncio.Event()

    async def waits_after_a_call(task, client):
        await client.chat.completions.create(model="policy", messages=list(task["raw_prompt"]))
        called.set()
        await asyncio.sleep(60)

    rollout = AgentRollout(_settings("agent_timeout=120"), tiny_tokenizer, backend,
                           waits_after_a_call)  # fmt: skip

    async def run_and_cancel():
        ctx = rollout.new_context()
        (request,) = rollout.build_requests(prompts_batch(1), 1)
        task = asyncio.ensure_future(rollout.run_request(request, ctx))
        await called.wait()
        assert list(rollout.app.state.sessions) == [request.request_id]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return task

    task = asyncio.run(run_and_cancel())
    assert task.cancelled()
    assert rollout.app.state.sessions == {}


def test_the_agents_limit_kills_are_summed(tiny_tokenizer):
    """A harness agent's dict says how many of its runs an episode limit ended
    (agentrl.agents): the batch's sum is ``agent/limit_kills``, kept in each sample's
    reward_scores; a sample whose agent failed or said nothing counts 0."""
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
    kills = {0: 2, 1: 1, 2: 0}

    async def limited(task, client):
        k = int(re.search(r"conv-(\d+)", task["raw_prompt"][0]["content"]).group(1))
        await client.chat.completions.create(model="policy", messages=list(task["raw_prompt"]))
        if k == 3:
            return 0.5
        return {"score": 0.0, "limit": "pids" if kills[k] else None, "limit_kills": kills[k]}

    rollout = AgentRollout(_settings("agent_timeout=5"), tiny_tokenizer, backend, limited)
    out = asyncio.run(rollout.agenerate_sequences(prompts_batch(4)))
    assert out.meta_info["metrics"]["agent/limit_kills"] == 3.0
    assert [s.get("limit_kills") for s in out.non_tensor_batch["reward_scores"]] == [
        2, 1, 0, None]


async def rewriting_agent(task, client):
    """Two calls, then one that drops them for a fresh question: a second segment."""
    messages = list(task["raw_prompt"])
    reply = await client.chat.completions.create(model="policy", messages=messages)
    messages += [reply.choices[0].message, {"role": "user", "content": "Go on."}]
    await client.chat.completions.create(model="policy", messages=messages)
    fresh = [{"role": "user", "content": task["raw_prompt"][0]["content"] + " Once more."}]
    await client.chat.completions.create(model="policy", messages=fresh)
    return 1.0 if "conv-0" in task["raw_prompt"][0]["content"] else 0.0


def _rewriting_rollout(tiny_tokenizer, *overrides):
    scripts = {k: ["ab<|im_end|>", "ab<|im_end|>"] for k in range(2)}
    backend = ConversationScriptBackend(tiny_tokenizer, scripts)
    config = _settings("n=2", *overrides)
    return AgentRollout(config, tiny_tokenizer, backend, rewriting_agent), backend


def test_every_segment_of_a_rewritten_session_is_a_row_of_its_episode(tiny_tokenizer):
    rollout, backend = _rewriting_rollout(tiny_tokenizer)
    out = asyncio.run(rollout.agenerate_sequences(prompts_batch(2, uid=['p0', 'p1'])))
    assert len(out) == 8  # 2 prompts x n=2 episodes x 2 segments
    metrics = out.meta_info["metrics"]
    assert metrics["agent/segments"] == 8 and metrics["rollout/agent_rewrites"] == 4
    assert metrics["rollout/requests"] == 4  # per episode, not per row
    recorded = sum(len(ids) for calls in backend.outputs.values() for ids in calls)
    assert metrics["agent/tokens_recorded"] == metrics["agent/tokens_trained"] == recorded
    episodes = list(out.non_tensor_batch["episode_id"])
    rows = list(out.non_tensor_batch["episode_row"])
    assert len(set(episodes)) == 4 and sorted(rows) == [0, 0, 0, 0, 1, 1, 1, 1]
    # the earlier segment (the two calls before the rewrite) trains with loss mask 1
    uids = list(out.non_tensor_batch["uid"])
    for i in range(8):
        mask = out.batch["response_mask"][i].bool()
        trained = out.batch["responses"][i][mask].tolist()
        reward = float(out.batch["rm_scores"][i].sum())
        if rows[i] == 0:  # the last segment: one call, the reward
            assert len(trained) == len(tiny_tokenizer.encode("ab<|im_end|>"))
        else:  # the earlier one: both calls, no reward of its own
            assert len(trained) == 2 * len(tiny_tokenizer.encode("ab<|im_end|>"))
            assert reward == 0.0
        partner = next(j for j in range(8) if episodes[j] == episodes[i] and j != i)
        assert uids[partner] == uids[i]
    assert sorted(float(out.batch["rm_scores"][i].sum()) for i in range(8)) == [0.0] * 6 + [1.0] * 2


def test_agent_segments_last_trains_only_the_last_segment(tiny_tokenizer):
    rollout, backend = _rewriting_rollout(tiny_tokenizer, "agent_segments=last")
    out = asyncio.run(rollout.agenerate_sequences(prompts_batch(2)))
    assert len(out) == 4 and set(out.non_tensor_batch["episode_row"]) == {0}
    metrics = out.meta_info["metrics"]
    assert metrics["agent/tokens_trained"] == metrics["agent/tokens_recorded"] / 3


def test_each_row_carries_its_place_in_the_session_tree(tiny_tokenizer):
    rollout, _ = _rewriting_rollout(tiny_tokenizer)
    out = asyncio.run(rollout.agenerate_sequences(prompts_batch(2, uid=["p0", "p1"])))
    trees = list(out.non_tensor_batch["segment"])
    rows = list(out.non_tensor_batch["episode_row"])
    for tree, row, i in zip(trees, rows, range(len(out)), strict=True):
        assert tree["session_segments"] == 2 and tree["session_side_calls"] == 0
        assert tree["side_call"] is False
        if row == 0:  # the last segment: a child of the first, which it shares no message with
            assert tree["index"] == 1 and tree["parent"] == 0 and tree["branch_message"] == 0
            assert tree["branch"] == "fork"
            prompt = out.batch["prompts"][i][out.batch["prompts"][i] != tiny_tokenizer.pad_token_id]
            # both prompts open with the same user turn's first tokens, then differ
            assert 0 < tree["branch_token"] < len(prompt)
        else:
            assert tree == {"index": 0, "parent": None, "branch": None, "branch_message": 0,
                            "branch_token": 0, "side_call": False, "session_segments": 2,
                            "session_side_calls": 0}
    assert all("segment_tree" not in s for s in out.non_tensor_batch["reward_scores"])


def test_a_side_call_is_numbered_after_the_episode_segments():
    from agentrl.gateway.agent_rollout import segment_tree
    from agentrl.gateway.sessions import Segment, Session

    session = Session("s")
    session.segments = [Segment.from_prompt([1, 2], [], []), Segment.from_prompt([1, 3], [], [])]
    session.segments[1].parent, session.segments[1].branch_token = 0, 1
    session.side = [Segment.from_prompt([9], [], []), Segment.from_prompt([8], [], [])]
    assert [segment_tree(session, s)["index"] for s in session.segments + session.side] == [
        0, 1, 2, 3]
    assert segment_tree(session, session.side[1]) == {
        "index": 3, "parent": None, "branch": None, "branch_message": 0, "branch_token": 0,
        "side_call": True, "session_segments": 2, "session_side_calls": 2}
    assert segment_tree(session, session.segments[1])["parent"] == 0
