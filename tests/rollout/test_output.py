"""build_output / request_metrics: padding, order, masks and counts from finished requests."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.protocol import DataProto
from agentrl.rollout.output import PaddedRows, batch_timing, build_output, request_metrics
from agentrl.rollout.request import AsyncRolloutRequest, FinishReason, RequestState


def request(
    i: int, offset: int, prompt: list[int], response: list[tuple[int, int, float]], **fields
) -> AsyncRolloutRequest:
    req = AsyncRolloutRequest(
        batch_data_id=i,
        rollout_offset=offset,
        request_id=f"{i}-{offset}",
        messages=[],
        tool_schemas=[],
        tools_kwargs={},
        interaction_kwargs={},
        **fields,
    )
    req.append(prompt, 0)
    req.prompt_length = len(prompt)
    for token, mask, log_prob in response:
        req.append([token], mask, [log_prob])
    req.finish_reason = FinishReason.STOP
    req.state = RequestState.COMPLETED
    return req


def test_build_output_sorts_pads_and_repeats_columns():
    batch = DataProto.from_dict(
        non_tensors={"uid": ["a", "b"], "data_source": ["x", "y"]}, meta_info={"validate": True}
    )
    requests = [
        request(1, 0, [7, 8], [(30, 1, -0.3)]),
        request(
            0,
            1,
            [5],
            [(20, 1, -0.2), (21, 0, 0.0), (22, 1, -0.4)],
            step_rewards=[(0, 0.5), (0, 0.25), (9, 1.0)],
        ),
        request(0, 0, [1, 2, 3, 4], [(10, 1, -0.1)]),  # prompt longer than 3: keeps the end
    ]
    requests[0].note_infra_error("search", "the retriever is down")
    out = build_output(
        requests, batch, prompt_length=3, response_length=3, pad_token_id=0, with_log_probs=True
    )
    assert out.batch["prompts"].tolist() == [[2, 3, 4], [0, 0, 5], [0, 7, 8]]
    assert out.batch["responses"].tolist() == [[10, 0, 0], [20, 21, 22], [30, 0, 0]]
    assert out.batch["attention_mask"].tolist() == [
        [1, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 1],
        [0, 1, 1, 1, 0, 0],
    ]
    assert out.batch["position_ids"].tolist() == [
        [0, 1, 2, 3, 3, 3],
        [0, 0, 0, 1, 2, 3],
        [0, 0, 1, 2, 2, 2],
    ]
    assert out.batch["response_mask"].tolist() == [[1, 0, 0], [1, 0, 1], [1, 0, 0]]
    assert out.batch["loss_mask"].tolist() == [
        [0, 0, 0, 1, 0, 0],
        [0, 0, 0, 1, 0, 1],
        [0, 0, 0, 1, 0, 0],
    ]
    assert torch.allclose(out.batch["rollout_log_probs"][1], torch.tensor([-0.2, 0.0, -0.4]))
    assert out.batch["step_rewards"].tolist()[1] == [0.75, 0.0, 0.0]  # position 9 is cut off
    assert list(out.non_tensor_batch["uid"]) == ["a", "a", "b"]
    assert list(out.non_tensor_batch["finish_reason"]) == ["stop"] * 3
    assert list(out.non_tensor_batch["infra_error"]) == [
        None, None, {"kind": "search", "error": "the retriever is down"}]
    assert out.meta_info == {"validate": True}
    without = build_output(
        requests, batch, prompt_length=3, response_length=3, pad_token_id=0, with_log_probs=False
    )
    assert "rollout_log_probs" not in without.batch.keys()


def test_request_metrics_counts():
    ok = request(0, 0, [1], [(2, 1, 0.0)])
    ok.metrics.tool_calls.update({"calc": 2, "search": 1})
    ok.metrics.tool_errors["timeout"] += 1
    ok.metrics.assistant_turns, ok.metrics.user_turns = 3, 2
    ok.metrics.tokenization = "match"
    bad = request(1, 0, [1], [(2, 1, 0.0), (3, 1, 0.0), (4, 1, 0.0)])
    bad.state, bad.finish_reason, bad.truncation = RequestState.FAILED, FinishReason.ABORT, "x"
    bad.metrics.backend_retries, bad.metrics.backend_errors = 3, 1
    bad.metrics.assistant_turns = 1
    bad.note_infra_error("generation", "the engine is down")
    bad.note_infra_error("search", "the second failure is not kept")
    assert bad.infra_error == {"kind": "generation", "error": "the engine is down"}
    metrics = request_metrics([ok, bad])
    assert metrics == {
        "rollout/requests": 2.0,
        "rollout/failed": 1.0,
        "rollout/aborted": 0.0,
        "rollout/truncated": 1.0,
        "rollout/backend_retries": 3.0,
        "rollout/backend_errors": 1.0,
        "rollout/parse_errors": 0.0,
        "rollout/interaction_errors": 0.0,
        "rollout/tool_responses_truncated": 0.0,
        "rollout/infra_failed": 1.0,
        "rollout/infra_failed/generation": 1.0,
        "rollout/assistant_turns/mean": 2.0,
        "rollout/assistant_turns/max": 3.0,
        "rollout/user_turns/mean": 1.0,
        "rollout/response_length/mean": 2.0,
        "rollout/response_length/max": 3.0,
        "rollout/tool_calls": 3.0,
        "rollout/tool_errors": 1.0,
        "rollout/tool_calls/calc": 2.0,
        "rollout/tool_calls/search": 1.0,
        "rollout/tool_errors/timeout": 1.0,
        "rollout/finish_reason/abort": 1.0,
        "rollout/finish_reason/stop": 1.0,
        "rollout/tokenization/match": 1.0,
        "rollout/tokenization/unchecked": 1.0,
            "rollout/tool_call_rate": 0.5,
    }
    ok.metrics.generation_s, bad.metrics.tool_s = 1.5, 0.25
    assert batch_timing([ok, bad], 2.0) == {
        "rollout/wall_s": 2.0,
        "rollout/generation_s": 1.5,
        "rollout/tool_s": 0.25,
        "rollout/interaction_s": 0.0,
    }


def _reference(requests, P, R, pad):
    """The padded tensors as the output contract defines them, built with whole-batch torch
    ops (the implementation before rows were written one by one)."""
    requests = sorted(requests, key=lambda r: (r.batch_data_id, r.rollout_offset))

    def pad_rows(rows, length, value, left, dtype):
        out = torch.full((len(rows), length), value, dtype=dtype)
        for i, row in enumerate(rows):
            row = list(row)[-length:] if left else list(row)[:length]
            if row:
                if left:
                    out[i, length - len(row):] = torch.tensor(row, dtype=dtype)
                else:
                    out[i, :len(row)] = torch.tensor(row, dtype=dtype)
        return out

    def prompt(r):
        return r.input_ids[: r.prompt_length]

    def after(r, values):
        return values[r.prompt_length :]

    prompts = pad_rows([prompt(r) for r in requests], P, pad, True, torch.long)
    responses = pad_rows([after(r, r.input_ids) for r in requests], R, pad, False, torch.long)
    prompt_mask = pad_rows([[1] * r.prompt_length for r in requests], P, 0, True, torch.long)
    response_attention = pad_rows([[1] * len(after(r, r.input_ids)) for r in requests], R, 0,
                                  False, torch.long)
    response_mask = pad_rows([after(r, r.loss_mask) for r in requests], R, 0, False,
                             torch.long)
    attention = torch.cat([prompt_mask, response_attention], 1)
    step = torch.zeros((len(requests), R))
    for i, r in enumerate(requests):
        for position, reward in r.step_rewards:
            if position < R:
                step[i, position] += reward
    return {
        "prompts": prompts, "responses": responses,
        "input_ids": torch.cat([prompts, responses], 1), "attention_mask": attention,
        "position_ids": torch.clamp(attention.cumsum(-1) - 1, min=0),
        "loss_mask": torch.cat([torch.zeros_like(prompts), response_mask], 1),
        "response_mask": response_mask, "step_rewards": step,
        "rollout_log_probs": pad_rows([after(r, r.rollout_log_probs) for r in requests], R,
                                      0.0, False, torch.float32),
        "rollout_versions": pad_rows([after(r, r.weight_versions) for r in requests], R, -1,
                                     False, torch.long),
    }


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.lists(
    st.tuples(st.integers(1, 99), st.integers(0, 1), st.floats(-3, 0)), max_size=7),
    st.lists(st.tuples(st.integers(0, 8), st.floats(-1, 1)), max_size=2)),
    min_size=1, max_size=6), st.integers(1, 5), st.integers(1, 5), st.randoms())
def test_rows_added_one_by_one_match_the_whole_batch_definition(rows, P, R, rng):
    requests = []
    for i, (prompt_len, response, rewards) in enumerate(rows):
        req = request(i // 2, i % 2, list(range(1, prompt_len + 1)), response,
                      step_rewards=list(rewards))
        req.weight_versions[prompt_len:] = [3] * len(response)
        requests.append(req)
    expected = _reference(requests, P, R, pad=0)
    padded = PaddedRows([(r.batch_data_id, r.rollout_offset) for r in requests], P, R, 0, True)
    for req in rng.sample(requests, len(requests)):  # in the order they finish
        padded.add(req)
    batch = DataProto.from_dict(non_tensors={"uid": [str(k) for k in range(len(rows))]})
    out = build_output(requests, batch, prompt_length=P, response_length=R, pad_token_id=0,
                       with_log_probs=True, rows=padded)
    at_once = build_output(requests, batch, prompt_length=P, response_length=R,
                           pad_token_id=0, with_log_probs=True)
    for key, value in expected.items():
        assert torch.equal(out.batch[key], value.to(out.batch[key].dtype)), key
        assert torch.equal(at_once.batch[key], out.batch[key]), key
        assert out.batch[key].dtype == (torch.float32 if value.is_floating_point()
                                        else torch.long), key


def test_a_row_never_added_is_an_error():
    import pytest

    padded = PaddedRows([(0, 0), (0, 1)], 2, 2, 0, False)
    padded.add(request(0, 0, [1], [(2, 1, 0.0)]))
    with pytest.raises(RuntimeError, match="1 rows of the output were never added"):
        padded.tensors()


def test_rows_added_while_the_padding_is_filled_are_written_after_it():
    import threading

    padded = PaddedRows([(0, 0), (1, 0)], 2, 3, 9, True)
    padded._padding.join()
    release = threading.Event()
    fill = padded._padding = threading.Thread(target=release.wait)  # a fill still running
    fill.start()
    first = request(0, 0, [1], [(2, 1, -0.5)])
    padded.add(first)  # queued: the event loop does not wait for the fill
    assert fill.is_alive() and padded._waiting
    release.set()
    fill.join()
    padded.add(request(1, 0, [3, 4], [(5, 0, 0.0), (6, 1, -1.0)]))  # writes both
    tensors = padded.tensors()
    assert tensors["input_ids"].tolist() == [[9, 1, 2, 9, 9], [3, 4, 5, 6, 9]]
    assert tensors["rollout_log_probs"][0].tolist() == [-0.5, 0.0, 0.0]
