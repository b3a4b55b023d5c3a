"""AsyncRolloutEngine: the tokenization sanity check, interactions, and the real backends."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentrl.interactions import BaseInteraction
from agentrl.rollout import AsyncRolloutEngine, AsyncRolloutRequest
from agentrl.rollout.backends import GenerationOutput
from agentrl.testing.rollout import (
    ConversationScriptBackend,
    prompts_batch,
    rollout_config,
    run_batch,
)

# ---------------------------------------------------------------------- tokenization check


def _drifting_tokenizer(tiny_model_dir, filter_name: str):
    from transformers import AutoTokenizer

    from agentrl.models.chat_template import QWEN25_CHAT_TEMPLATE

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    plain = "message.content + '<|im_end|>\\n'"
    assert plain in QWEN25_CHAT_TEMPLATE
    tokenizer.chat_template = QWEN25_CHAT_TEMPLATE.replace(
        plain, f"(message.content | {filter_name}) + '<|im_end|>\\n'"
    )
    return tokenizer


@pytest.mark.parametrize(
    "filter_name, mode, state, tokenization",
    [
        ("trim", "strict", "failed", "strippable_drift"),
        ("trim", "ignore_strippable", "completed", "strippable_drift"),
        ("replace('answer', 'reply')", "ignore_strippable", "failed", "text_drift"),
        ("replace('answer', 'reply')", "disable", "completed", "unchecked"),
    ],
)
def test_sanity_check_modes(tiny_model_dir, filter_name, mode, state, tokenization):
    tokenizer = _drifting_tokenizer(tiny_model_dir, filter_name)
    backend = ConversationScriptBackend(tokenizer, {0: ["the answer  <|im_end|>"]})
    requests: list[AsyncRolloutRequest] = []
    config = rollout_config(f"multi_turn.tokenization_sanity_check_mode={mode}")
    out = run_batch(AsyncRolloutEngine(config, tokenizer, backend), prompts_batch(1), requests)
    assert (requests[0].state.value, requests[0].metrics.tokenization) == (state, tokenization)
    assert out.meta_info["metrics"][f"rollout/tokenization/{tokenization}"] == 1
    assert bool(out.batch["response_mask"].sum()) == (state == "completed")


def test_token_drift_is_reported_but_not_failed(tiny_tokenizer):
    # ids the tokenizer would never produce for this text: "the" spelled letter by letter
    assert len(tiny_tokenizer.encode("the", add_special_tokens=False)) == 1
    spelled = [*tiny_tokenizer.convert_tokens_to_ids(list("the")), tiny_tokenizer.eos_token_id]

    class Spelling(ConversationScriptBackend):
        async def generate(self, input_ids, sampling_params, request_id):
            return GenerationOutput(spelled, "the", "stop", [0.0] * 4)

    requests: list[AsyncRolloutRequest] = []
    run_batch(
        AsyncRolloutEngine(rollout_config(), tiny_tokenizer, Spelling(tiny_tokenizer, {})),
        prompts_batch(1),
        requests,
    )
    assert (requests[0].state.value, requests[0].metrics.tokenization) == (
        "completed",
        "token_drift",
    )
    assert requests[0].response_ids == spelled


# ---------------------------------------------------------------------- interactions


class TryAgain(BaseInteraction):
    """Says "wrong" until the model answers 42; scores 1.0 then."""

    async def generate_response(self, instance_id, messages, **kwargs):
        answer = messages[-1]["content"]
        if "42" in answer:
            return True, "right", 1.0, {}
        return False, "Wrong, try again.", 0.0, {}


def test_interaction_turns(tiny_tokenizer):
    scripts = {0: ["41<|im_end|>", "40<|im_end|>", "42<|im_end|>"]}
    batch = prompts_batch(1, interaction_kwargs=[{"name": "again"}])
    requests: list[AsyncRolloutRequest] = []
    interaction = TryAgain({"name": "again"})
    out = run_batch(
        AsyncRolloutEngine(
            rollout_config(),
            tiny_tokenizer,
            ConversationScriptBackend(tiny_tokenizer, scripts),
            interactions={"again": interaction},
        ),
        batch,
        requests,
    )
    roles = [(m["role"], m["content"]) for m in out.non_tensor_batch["messages"][0]]
    assert roles[1:] == [
        ("assistant", "41"),
        ("user", "Wrong, try again."),
        ("assistant", "40"),
        ("user", "Wrong, try again."),
        ("assistant", "42"),
    ]
    assert out.non_tensor_batch["reward_scores"][0] == {"user_turn_rewards": [0.0, 0.0, 1.0]}
    assert requests[0].metrics.tokenization == "match"
    assert interaction._instance_dict == {}  # finalize_interaction ran
    with pytest.raises(
        ValueError, match="interaction_kwargs.name is 'other'; loaded interactions: again"
    ):
        run_batch(
            AsyncRolloutEngine(
                rollout_config(),
                tiny_tokenizer,
                ConversationScriptBackend(tiny_tokenizer, scripts),
                interactions={"again": interaction},
            ),
            prompts_batch(1, interaction_kwargs=[{"name": "other"}]),
        )


# ---------------------------------------------------------------------- real backends


class Recorder:
    """Passes every call to a real backend and keeps (input ids, output) pairs."""

    def __init__(self, backend):
        self.backend, self.calls = backend, []

    async def generate(self, input_ids, sampling_params, request_id):
        out = await self.backend.generate(input_ids, sampling_params, request_id)
        self.calls.append((list(input_ids), out))
        return out

    async def abort(self, request_id):
        await self.backend.abort(request_id)


CALCULATOR_CONFIG = {
    "tools": [
        {
            "class_name": "tools.calculator.CalculatorTool",
            "config": {},
            "tool_schema": {
                "type": "function",
                "function": {
                    "name": "calculator",
                    "description": "Evaluate arithmetic.",
                    "parameters": {
                        "type": "object",
                        "properties": {"expression": {"type": "string"}},
                        "required": ["expression"],
                    },
                },
            },
        }
    ]
}


def test_hf_backend_end_to_end(varied_model_dir, tiny_tokenizer):
    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.tools import load_tools

    hf = HFBackend.from_pretrained(varied_model_dir, tiny_tokenizer)
    backend = Recorder(hf)
    config = rollout_config("n=2", "response_length=24", "multi_turn.max_new_tokens_per_turn=12")
    engine = AsyncRolloutEngine(config, tiny_tokenizer, backend, load_tools(CALCULATOR_CONFIG))
    requests: list[AsyncRolloutRequest] = []
    try:
        out = run_batch(engine, prompts_batch(3, tools_kwargs={"calculator": {}}), requests)
    finally:
        asyncio.run(hf.aclose())
    assert len(out) == 6 and out.meta_info["metrics"]["rollout/failed"] == 0
    for req in requests:
        # the calls whose input is a prefix of this trajectory and whose output follows it
        # (one per position: siblings of the same prompt may have sampled the same tokens)
        mine = {
            len(inp): o
            for inp, o in backend.calls
            if req.input_ids[: len(inp)] == inp
            and req.input_ids[len(inp) : len(inp) + len(o.output_ids)] == o.output_ids
        }
        assert mine, "every request made at least one backend call"
        expected_ids = [t for _, o in sorted(mine.items()) for t in o.output_ids]
        expected_lp = [p for _, o in sorted(mine.items()) for p in o.output_log_probs]
        model = [
            (t, p)
            for t, p, m in zip(req.input_ids, req.rollout_log_probs, req.loss_mask, strict=True)
            if m
        ]
        assert [t for t, _ in model] == expected_ids
        assert [p for _, p in model] == pytest.approx(expected_lp)
        assert req.response_length <= 24


def test_hf_in_process_and_sglang_over_serve_give_the_same_greedy_rollout(
    varied_model_dir, tiny_tokenizer
):
    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.rollout.backends.serve import create_app
    from agentrl.rollout.backends.sglang import SGLangBackend
    from agentrl.tools import load_tools
    from agentrl.utils.serving import serve_in_thread

    config = rollout_config(
        "do_sample=false", "response_length=32", "multi_turn.max_new_tokens_per_turn=16"
    )
    batch = prompts_batch(3, tools_kwargs={"calculator": {}})

    def rollout(backend):
        engine = AsyncRolloutEngine(config, tiny_tokenizer, backend, load_tools(CALCULATOR_CONFIG))
        return run_batch(engine, batch)

    local = HFBackend.from_pretrained(varied_model_dir, tiny_tokenizer)
    served = HFBackend.from_pretrained(varied_model_dir, tiny_tokenizer)
    try:
        in_process = rollout(local)
        with serve_in_thread(
            create_app(served, model_path=str(varied_model_dir)), startup_timeout=60
        ) as url:
            client = SGLangBackend([url], request_timeout=60, tokenizer=tiny_tokenizer)
            try:
                over_http = rollout(client)
            finally:
                asyncio.run(client.aclose())
    finally:
        asyncio.run(local.aclose())
    assert torch.equal(in_process.batch["input_ids"], over_http.batch["input_ids"])
    assert torch.equal(in_process.batch["loss_mask"], over_http.batch["loss_mask"])
    assert torch.allclose(
        in_process.batch["rollout_log_probs"], over_http.batch["rollout_log_probs"], atol=1e-5
    )
    assert len(set(map(tuple, in_process.batch["responses"].tolist()))) == 3  # not degenerate
