"""A request's states, finish reasons and counters (agentrl/rollout/request_status.py)."""

from __future__ import annotations

from dataclasses import asdict, fields

from agentrl.rollout.request import AsyncRolloutRequest
from agentrl.rollout.request_status import FinishReason, RequestMetrics, RequestState


def test_states_and_reasons_are_their_strings():
    assert [s.value for s in RequestState] == [
        "pending", "running", "tool_calling", "interacting", "completed", "failed"]
    assert [r.value for r in FinishReason] == ["stop", "length", "tool_call", "abort"]
    assert RequestState.FAILED == "failed" and FinishReason.LENGTH == "length"


def test_a_new_request_starts_pending_with_empty_counters():
    fresh = RequestMetrics()
    assert fresh.tokenization == "unchecked" and fresh.tool_calls == {} and fresh.parse_errors == 0
    request = AsyncRolloutRequest(batch_data_id=0, rollout_offset=0, request_id="r",
                                  messages=[], tool_schemas=[], tools_kwargs={},
                                  interaction_kwargs={})  # fmt: skip
    assert request.state is RequestState.PENDING and request.finish_reason is None
    assert request.metrics == fresh and request.metrics is not RequestMetrics()


def test_as_dict_has_every_field_with_plain_dicts_and_copied_tool_metrics():
    metrics = RequestMetrics(assistant_turns=3, generation_s=1.5)
    metrics.tool_calls["calc"] += 2
    metrics.tool_errors["timeout"] += 1
    metrics.tool_metrics.append({"calc": {"latency_s": [0.1]}})
    out = metrics.as_dict()
    # asdict's answer, but its Counters are rebuilt from their items (a Counter of pairs)
    expected = {**asdict(metrics), "tool_calls": {"calc": 2}, "tool_errors": {"timeout": 1}}
    assert out == expected and list(out) == [f.name for f in fields(metrics)]
    assert type(out["tool_calls"]) is dict and type(out["tool_errors"]) is dict
    out["tool_metrics"][0]["calc"]["latency_s"].append(9.0)
    assert metrics.tool_metrics == [{"calc": {"latency_s": [0.1]}}]  # a deep copy
