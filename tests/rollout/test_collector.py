"""The trajectory collector: sampling parameters, response budgets and the padded output,
without an engine."""

from __future__ import annotations

import pytest

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.collector import TrajectoryCollector
from agentrl.rollout.engine_config import RolloutConfig
from agentrl.rollout.request import AsyncRolloutRequest, FinishReason
from agentrl.testing.rollout import PROMPT_LENGTH, RESPONSE_LENGTH, prompts_batch, rollout_config


def _collector(tokenizer, *overrides: str) -> TrajectoryCollector:
    return TrajectoryCollector(RolloutConfig.from_config(rollout_config(*overrides)), tokenizer)


def test_the_collector_takes_the_typed_config_not_the_tree(tiny_tokenizer):
    with pytest.raises(TypeError, match="RolloutConfig"):
        TrajectoryCollector(rollout_config(), tiny_tokenizer)


def test_sampling_params_greedy_for_validation_and_sampled_for_training(tiny_tokenizer):
    collector = _collector(tiny_tokenizer, "n=4", "temperature=0.7")
    n, params = collector.sampling_params(validate=False)
    assert n == 4 and params["temperature"] == 0.7
    assert params["stop_token_ids"] == [tiny_tokenizer.eos_token_id]
    n, params = collector.sampling_params(validate=True)  # val_kwargs: greedy, one sample
    assert n == 1 and params["temperature"] == 0.0 and params["top_k"] == -1


def test_response_budget_is_the_tighter_of_the_two_limits(tiny_tokenizer):
    collector = _collector(tiny_tokenizer, "max_model_len=1100")
    request = AsyncRolloutRequest(batch_data_id=0, rollout_offset=0, request_id="r",
                                  messages=[], tool_schemas=[], tools_kwargs={},
                                  interaction_kwargs={}, prompt_length=1000)  # fmt: skip
    assert collector.response_budget(request) == (100, "max_model_len")
    request.prompt_length = 10
    assert _collector(tiny_tokenizer).response_budget(request) == (
        RESPONSE_LENGTH, "response_length")


def test_collect_pads_finished_requests_into_the_output(tiny_tokenizer):
    collector = _collector(tiny_tokenizer, "n=1")
    renderer = ChatRenderer(tiny_tokenizer)
    batch = prompts_batch(2)
    requests = []
    for i in range(2):
        messages = list(batch.non_tensor_batch["raw_prompt"][i])
        request = AsyncRolloutRequest.from_prompt(renderer, messages, [], batch_data_id=i,
                                                  rollout_offset=0, request_id=f"r{i}")  # fmt: skip
        request.add_model_output(renderer, renderer.encode("ok<|im_end|>"), None)
        request.finish(FinishReason.STOP)
        requests.append(request)
    out = collector.collect(requests, batch, wall_s=1.0)
    assert out.batch["prompts"].shape == (2, PROMPT_LENGTH)
    assert out.batch["responses"].shape == (2, RESPONSE_LENGTH)
    assert out.batch["response_mask"].sum(-1).tolist() == [len(renderer.encode("ok<|im_end|>"))] * 2
    assert out.meta_info["timing"]["rollout/wall_s"] == 1.0
    assert out.meta_info["metrics"]["rollout/requests"] == 2
    assert out.meta_info["metrics"]["rollout/failed"] == 0
