"""The one trajectory type: aligned lists stay aligned through appends, model turns, deltas
and cuts; the request and the gateway's segment are both trajectories."""

from __future__ import annotations

import pytest

from agentrl.gateway.sessions import Segment
from agentrl.models.chat import ChatRenderer
from agentrl.rollout.request import AsyncRolloutRequest
from agentrl.rollout.trajectory import ALIGNED, TokenTrajectory


def _lengths(t: TokenTrajectory) -> set[int]:
    return {len(getattr(t, name)) for name in ALIGNED}


def test_append_keeps_every_list_aligned_and_positions_running():
    t = TokenTrajectory()
    t.append([5, 6, 7], 0)
    t.append([8, 9], 1, [-0.5, -0.25], weight_version=3)
    assert _lengths(t) == {5}
    assert t.position_ids == [0, 1, 2, 3, 4] and t.attention_mask == [1] * 5
    assert t.loss_mask == [0, 0, 0, 1, 1]
    assert t.rollout_log_probs == [0.0, 0.0, 0.0, -0.5, -0.25]
    assert t.weight_versions == [-1, -1, -1, 3, 3]
    with pytest.raises(ValueError, match="1 log-probs for 2 tokens"):
        t.append([1, 2], 1, [-1.0])
    assert _lengths(t) == {5}  # nothing half-appended


def test_cut_trims_all_lists_and_says_whether_it_did():
    t = TokenTrajectory()
    t.append(list(range(6)), 1)
    assert t.cut(10) is False and _lengths(t) == {6}
    assert t.cut(4) is True and _lengths(t) == {4} and t.input_ids == [0, 1, 2, 3]


def test_a_model_turn_then_a_delta_render_like_the_whole_conversation(tiny_tokenizer):
    renderer = ChatRenderer(tiny_tokenizer)
    user = [{"role": "user", "content": "2+2?"}]
    t = TokenTrajectory()
    t.append(renderer.prompt_ids(user, None), 0)
    reply = renderer.encode("4<|im_end|>")
    assert t.add_model_output(renderer, reply, None, weight_version=1) == "4"
    assert t.pending_suffix  # the newline after <|im_end|> the model did not write
    follow = [{"role": "user", "content": "and 3+3?"}]
    t.append_delta(renderer, follow)
    assert t.pending_suffix == ""
    whole = renderer.render([*user, {"role": "assistant", "content": "4"}, *follow], True, None)
    assert renderer.decode(t.input_ids) == whole
    assert sum(t.loss_mask) == len(reply)


def test_the_request_and_the_segment_are_trajectories_and_copy_into_each_other():
    segment = Segment.from_prompt([1, 2, 3], tools=[], messages=[{"role": "user", "content": "x"}])
    segment.append([4, 5], 1, [-0.1, -0.2], weight_version=2)
    assert segment.token_ids == segment.input_ids == [1, 2, 3, 4, 5]
    assert segment.as_dict()["log_probs"] == [0.0, 0.0, 0.0, -0.1, -0.2]
    request = AsyncRolloutRequest(batch_data_id=0, rollout_offset=0, request_id="r",
                                  messages=[], tool_schemas=[], tools_kwargs={},
                                  interaction_kwargs={})  # fmt: skip
    assert isinstance(request, TokenTrajectory) and isinstance(segment, TokenTrajectory)
    request.copy_tokens(segment)
    assert request.input_ids == segment.input_ids and request.input_ids is not segment.input_ids
    assert request.loss_mask == [0, 0, 0, 1, 1] and request.weight_versions[-1] == 2
    with pytest.raises(ValueError, match="request r: 1 log-probs for 2 tokens"):
        request.append([1, 2], 1, [0.0])
