"""AsyncRolloutEngine: faults never end a batch; malformed calls; turn, length and concurrency limits."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agentrl.protocol import DataProto
from agentrl.rollout import AsyncRolloutEngine, AsyncRolloutRequest
from agentrl.rollout.backends import BackendError
from agentrl.testing.rollout import (
    ConversationScriptBackend,
    RecordingTool,
    call_text,
    make_tools,
    prompts_batch,
    rollout_config,
    run_batch,
)

# ---------------------------------------------------------------------- faults


class RaisingTool(RecordingTool):
    async def execute(self, instance_id, parameters, **kwargs):
        self.events.append(("execute", instance_id))
        raise RuntimeError("disk on fire")


class HangingTool(RecordingTool):
    async def execute(self, instance_id, parameters, **kwargs):
        self.events.append(("execute", instance_id))
        await asyncio.sleep(60)


def test_faults_never_end_the_batch(tiny_tokenizer):
    calls = "\n".join([call_text("boom", "a"), call_text("hang", "b"), call_text("echo", "c")])
    scripts = {
        0: [calls + "<|im_end|>", "Done.<|im_end|>"],
        1: [calls + "<|im_end|>", "Done.<|im_end|>"],
        2: ["never<|im_end|>"],
    }
    tools = {
        "boom": RaisingTool("boom"),
        "hang": HangingTool("hang"),
        "echo": RecordingTool("echo"),
    }
    backend = ConversationScriptBackend(tiny_tokenizer, scripts, fail={2: 100})
    # on_infra_error=zero: the timeout (an infrastructure failure) reaches the model as text
    config = rollout_config("max_retries=2", "multi_turn.tool_timeout=0.2", "on_infra_error=zero")
    engine = AsyncRolloutEngine(config, tiny_tokenizer, backend, tools)
    requests: list[AsyncRolloutRequest] = []
    out = run_batch(engine, prompts_batch(3), requests)

    metrics = out.meta_info["metrics"]
    assert metrics["rollout/requests"] == 3
    assert metrics["rollout/failed"] == 1
    assert metrics["rollout/backend_errors"] == 1
    assert metrics["rollout/backend_retries"] == 2
    assert metrics["rollout/tool_errors/exception"] == 2
    assert metrics["rollout/tool_errors/timeout"] == 2
    assert metrics["rollout/tool_calls/echo"] == 2
    assert metrics["rollout/tool_errors"] == 4
    assert metrics["rollout/finish_reason/stop"] == 2
    # the timeouts and the engine down after its retries are infrastructure failures; the
    # RuntimeError of 'boom' is not (a tool's bug or the model's input)
    assert metrics["rollout/infra_failed"] == 3
    assert metrics["rollout/infra_failed/hang"] == 2 and metrics["rollout/infra_failed/generation"] == 1
    assert [e["kind"] for e in out.non_tensor_batch["infra_error"]] == ["hang", "hang", "generation"]
    failed = out.non_tensor_batch["request_state"].tolist().index("failed")
    assert failed == 2 and out.batch["response_mask"][2].sum() == 0
    assert out.batch["response_mask"][:2].sum(-1).gt(0).all()
    tool_messages = [
        m["content"] for m in out.non_tensor_batch["messages"][0] if m["role"] == "tool"
    ]
    assert tool_messages == [
        "Error: tool 'boom' failed: RuntimeError: disk on fire",
        "Error: tool 'hang' timed out after 0.2 s.",
        "c",
    ]
    for tool in tools.values():  # release ran for every instance, after calc_reward
        created = tool.instances("create")
        assert len(created) == 3 and sorted(created) == sorted(tool.instances("release"))
        for instance in created:
            events = [e for e, i in tool.events if i == instance]
            assert events[-2:] == ["calc_reward", "release"]


@pytest.mark.parametrize("mode", ["mask", "raise"])
def test_an_infrastructure_failure_ends_its_request_at_once(tiny_tokenizer, mode):
    """With on_infra_error mask (the default) or raise, a tool timing out ends the request
    FAILED after that turn (no more generation: it will not train); the others go on."""
    scripts = {
        0: [call_text("hang", "a") + "<|im_end|>", "Done.<|im_end|>"],
        1: [call_text("echo", "b") + "<|im_end|>", "Done.<|im_end|>"],
    }
    tools = {"hang": HangingTool("hang"), "echo": RecordingTool("echo")}
    backend = ConversationScriptBackend(tiny_tokenizer, scripts)
    config = rollout_config("multi_turn.tool_timeout=0.2", f"on_infra_error={mode}")
    out = run_batch(AsyncRolloutEngine(config, tiny_tokenizer, backend, tools), prompts_batch(2))
    assert list(out.non_tensor_batch["request_state"]) == ["failed", "completed"]
    assert out.non_tensor_batch["infra_error"][0] == {
        "kind": "hang", "error": "tool 'hang' timed out after 0.2 s."}
    assert out.non_tensor_batch["infra_error"][1] is None
    assert len(backend.outputs[(0, next(k[1] for k in backend.outputs if k[0] == 0))]) == 1
    assert out.batch["response_mask"][0].sum() == 0 and out.batch["response_mask"][1].sum() > 0
    assert out.meta_info["metrics"]["rollout/infra_failed"] == 1
    assert sorted(tools["hang"].instances("release")) == sorted(tools["hang"].instances("create"))


def test_an_unknown_on_infra_error_is_named(tiny_tokenizer):
    config = dict(rollout_config(), on_infra_error="skip")
    with pytest.raises(ValueError, match="on_infra_error is 'skip'; choose one of mask, zero, raise"):
        AsyncRolloutEngine(config, tiny_tokenizer, ConversationScriptBackend(tiny_tokenizer, {}))


def test_non_retryable_backend_error_fails_at_once(tiny_tokenizer):
    class Broken(ConversationScriptBackend):
        async def generate(self, input_ids, sampling_params, request_id):
            self.calls.append(sampling_params)
            raise BackendError("400: bad request", retryable=False)

    backend = Broken(tiny_tokenizer, {})
    out = run_batch(
        AsyncRolloutEngine(rollout_config("max_retries=5"), tiny_tokenizer, backend),
        prompts_batch(1),
    )
    assert len(backend.calls) == 1
    assert out.meta_info["metrics"]["rollout/backend_retries"] == 0
    assert out.non_tensor_batch["request_state"][0] == "failed"
    assert out.non_tensor_batch["infra_error"][0] is None  # a 400 is not the engine being down


def test_backend_timeout_is_retried_and_aborted(tiny_tokenizer):
    class Slow(ConversationScriptBackend):
        async def generate(self, input_ids, sampling_params, request_id):
            await asyncio.sleep(60)

    backend = Slow(tiny_tokenizer, {})
    config = rollout_config("max_retries=1", "request_timeout=0.05")
    out = run_batch(AsyncRolloutEngine(config, tiny_tokenizer, backend), prompts_batch(1))
    assert out.meta_info["metrics"]["rollout/backend_retries"] == 1
    assert len(backend.aborted) == 2
    assert out.non_tensor_batch["request_state"][0] == "failed"
    assert out.non_tensor_batch["infra_error"][0]["kind"] == "generation"


def test_cancellation_still_releases_every_instance(tiny_tokenizer):
    tools = {"hang": HangingTool("hang")}
    scripts = {k: [call_text("hang", "x") + "<|im_end|>"] for k in range(3)}
    engine = AsyncRolloutEngine(
        rollout_config(), tiny_tokenizer,
        ConversationScriptBackend(tiny_tokenizer, scripts), tools
    )

    async def cancel_midway():
        task = asyncio.ensure_future(engine.agenerate_sequences(prompts_batch(3)))
        while len(tools["hang"].instances("execute")) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    assert len(tools["hang"].instances("create")) == 3
    assert sorted(tools["hang"].instances("release")) == sorted(tools["hang"].instances("create"))


def test_create_failure_fails_only_that_request(tiny_tokenizer):
    class PickyTool(RecordingTool):
        async def create(self, instance_id=None, *, secret=None, **kwargs):
            if secret is None:
                raise ValueError("no secret")
            return await super().create(instance_id, secret=secret)

    tools = {"picky": PickyTool("picky")}
    batch = prompts_batch(2, tools_kwargs=None)
    batch.non_tensor_batch["tools_kwargs"] = np.array(
        [{"picky": {"create_kwargs": {"secret": 1}}}, {"picky": {}}], dtype=object
    )
    scripts = {0: ["ok<|im_end|>"], 1: ["ok<|im_end|>"]}
    out = run_batch(
        AsyncRolloutEngine(
            rollout_config(), tiny_tokenizer,
            ConversationScriptBackend(tiny_tokenizer, scripts), tools
        ),
        batch,
    )
    assert list(out.non_tensor_batch["request_state"]) == ["completed", "failed"]
    assert out.meta_info["metrics"]["rollout/tool_errors/create"] == 1


# ---------------------------------------------------------------------- malformed calls


def test_malformed_and_unknown_calls_become_error_messages(tiny_tokenizer):
    turn = (
        "<tool_call>{bad json}</tool_call>\n"
        + call_text("nope", "x")
        + "\n"
        + call_text("echo", "1")
        + "\n"
        + call_text("echo", "2")
        + "<|im_end|>"
    )
    scripts = {0: [turn, "Done.<|im_end|>"]}
    config = rollout_config("multi_turn.max_parallel_calls=1")  # counts runnable calls only
    requests: list[AsyncRolloutRequest] = []
    out = run_batch(
        AsyncRolloutEngine(
            config, tiny_tokenizer, ConversationScriptBackend(tiny_tokenizer, scripts), make_tools()
        ),
        prompts_batch(1),
        requests,
    )
    tools_said = [m["content"] for m in out.non_tensor_batch["messages"][0] if m["role"] == "tool"]
    assert tools_said[0].startswith(
        "Error: could not parse the tool call: the tool call is not "
        "valid JSON (Expecting property name enclosed in double "
        "quotes"
    )
    assert tools_said[1] == "Error: unknown tool 'nope'. Available tools: echo, reverse, wrap."
    assert tools_said[2] == "1"
    assert tools_said[3] == (
        "Error: at most 1 tool call(s) per turn are executed; this call to 'echo' was not."
    )
    ids = [
        m.get("tool_call_id") for m in out.non_tensor_batch["messages"][0] if m["role"] == "tool"
    ]
    assert ids == [None, "call_1_0", "call_1_1", "call_1_2"]  # the readable calls, numbered
    metrics = out.meta_info["metrics"]
    assert (
        metrics["rollout/parse_errors"],
        metrics["rollout/tool_errors/unknown_tool"],
        metrics["rollout/tool_errors/too_many_calls"],
    ) == (1, 1, 1)
    # the message's tool_calls are the readable calls, each answered by its id; the turn's
    # text (the malformed call included) is what the check renders, so it still matches
    assert out.non_tensor_batch["messages"][0][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": f"call_1_{k}", "type": "function",
             "function": {"name": name, "arguments": {"text": text}}}
            for k, (name, text) in enumerate([("nope", "x"), ("echo", "1"), ("echo", "2")])
        ],
    }  # fmt: skip
    assert requests[0].verbatim == {1: turn[: -len("<|im_end|>")]}
    assert requests[0].metrics.tokenization == "match"


def test_invalid_arguments_reach_the_model(tiny_tokenizer):
    turn = '<tool_call>\n{"name": "echo", "arguments": {"text": 5}}\n</tool_call><|im_end|>'
    out = run_batch(
        AsyncRolloutEngine(
            rollout_config(),
            tiny_tokenizer,
            ConversationScriptBackend(tiny_tokenizer, {0: [turn, "ok<|im_end|>"]}),
            make_tools(),
        ),
        prompts_batch(1),
    )
    tool = out.non_tensor_batch["messages"][0][2]
    assert tool == {
        "role": "tool",
        "name": "echo",
        "tool_call_id": "call_1_0",
        "content": "Error: invalid arguments for tool 'echo' at 'text': 5 is not of type 'string'",
    }
    assert out.meta_info["metrics"]["rollout/tool_errors/invalid_arguments"] == 1


# ---------------------------------------------------------------------- limits


def test_turn_limits(tiny_tokenizer):
    loop_forever = {0: [call_text("echo", "again") + "<|im_end|>"]}
    for override, turns, user_turns in [
        ("multi_turn.max_assistant_turns=3", 3, 2),
        ("multi_turn.max_user_turns=2", 3, 2),
    ]:
        engine = AsyncRolloutEngine(
            rollout_config(override),
            tiny_tokenizer,
            ConversationScriptBackend(tiny_tokenizer, loop_forever),
            make_tools(),
        )
        requests: list[AsyncRolloutRequest] = []
        out = run_batch(engine, prompts_batch(1), requests)
        assert out.non_tensor_batch["finish_reason"][0] == "tool_call"
        assert (requests[0].metrics.assistant_turns, requests[0].metrics.user_turns) == (
            turns,
            user_turns,
        )
        assert out.non_tensor_batch["num_turns"][0] == turns + user_turns + 1


def test_response_budget_truncates_every_aligned_list(tiny_tokenizer):
    long_tool = {0: [call_text("wrap", "x" * 200) + "<|im_end|>", "Done.<|im_end|>"]}
    requests: list[AsyncRolloutRequest] = []
    engine = AsyncRolloutEngine(
        rollout_config("response_length=40"),
        tiny_tokenizer,
        ConversationScriptBackend(tiny_tokenizer, long_tool),
        make_tools(),
    )
    out = run_batch(engine, prompts_batch(1), requests)
    req = requests[0]
    assert req.response_length == 40
    assert {len(req.input_ids), len(req.loss_mask), len(req.rollout_log_probs)} == {
        req.prompt_length + 40
    }
    assert (req.finish_reason.value, req.truncation) == ("length", "response_length")
    assert out.non_tensor_batch["truncation"][0] == "response_length"
    assert out.meta_info["metrics"]["rollout/truncated"] == 1


def test_max_model_len_is_the_binding_limit(tiny_tokenizer):
    backend = ConversationScriptBackend(tiny_tokenizer, {0: ["word " * 100 + "<|im_end|>"]})
    requests: list[AsyncRolloutRequest] = []
    engine = AsyncRolloutEngine(rollout_config("max_model_len=1100"), tiny_tokenizer, backend)
    run_batch(engine, prompts_batch(1), requests)
    assert backend.calls[0]["max_new_tokens"] == 1100 - requests[0].prompt_length
    assert requests[0].truncation is None  # the scripted output fit


def test_per_turn_cap_and_length_finish(tiny_tokenizer):
    backend = ConversationScriptBackend(
        tiny_tokenizer, {0: ["word " * 50 + "<|im_end|>"]}, finish_reason="length"
    )
    requests: list[AsyncRolloutRequest] = []
    engine = AsyncRolloutEngine(
        rollout_config("multi_turn.max_new_tokens_per_turn=7"),
        tiny_tokenizer,
        backend,
        make_tools(),
    )
    run_batch(engine, prompts_batch(1), requests)
    assert backend.calls[0]["max_new_tokens"] == 7
    assert requests[0].response_length == 7
    assert (requests[0].finish_reason.value, requests[0].truncation) == (
        "length",
        "max_new_tokens_per_turn",
    )


@pytest.mark.parametrize(
    "side, expected",
    [
        ("left", "abcdefgh...(truncated)"),
        ("right", "...(truncated)stuvwxyz"),
        ("middle", "abcd...(truncated)wxyz"),
    ],
)
def test_tool_response_truncation(tiny_tokenizer, side, expected):
    scripts = {0: [call_text("echo", "abcdefghijklmnopqrstuvwxyz") + "<|im_end|>", "ok<|im_end|>"]}
    config = rollout_config(
        "multi_turn.max_tool_response_length=8", f"multi_turn.tool_response_truncate_side={side}"
    )
    out = run_batch(
        AsyncRolloutEngine(
            config, tiny_tokenizer, ConversationScriptBackend(tiny_tokenizer, scripts), make_tools()
        ),
        prompts_batch(1),
    )
    assert out.non_tensor_batch["messages"][0][2]["content"] == expected
    assert out.meta_info["metrics"]["rollout/tool_responses_truncated"] == 1


def test_concurrency_bounds(tiny_tokenizer):
    scripts = {k: [call_text("echo", "x") + "<|im_end|>", "ok<|im_end|>"] for k in range(8)}
    tools = make_tools()

    async def slow(text):
        await asyncio.sleep(0.02)
        return text

    tools["echo"].respond = slow
    backend = ConversationScriptBackend(tiny_tokenizer, scripts)
    config = rollout_config("max_concurrent_requests=3", "multi_turn.max_concurrent_tool_calls=2")
    run_batch(AsyncRolloutEngine(config, tiny_tokenizer, backend, tools), prompts_batch(8))
    assert backend.max_in_flight == 3
    assert tools["echo"].max_running == 2


def test_prompt_longer_than_prompt_length_fails_the_request(tiny_tokenizer):
    batch = prompts_batch(2)
    batch.non_tensor_batch["raw_prompt"][1] = [{"role": "user", "content": "conv-1 " + "w " * 600}]
    scripts = {0: ["ok<|im_end|>"], 1: ["ok<|im_end|>"]}
    out = run_batch(
        AsyncRolloutEngine(
            rollout_config("prompt_length=300"),
            tiny_tokenizer,
            ConversationScriptBackend(tiny_tokenizer, scripts),
        ),
        batch,
    )
    assert list(out.non_tensor_batch["request_state"]) == ["completed", "failed"]
    assert out.batch["prompts"].shape == (2, 300)


def test_prompt_rendered_differently_from_the_dataset_is_warned_once(tiny_tokenizer, caplog):
    batch = prompts_batch(2, raw_prompt_ids=[[1, 2, 3], [4]])
    scripts = {0: ["ok<|im_end|>"], 1: ["ok<|im_end|>"]}
    engine = AsyncRolloutEngine(
        rollout_config(), tiny_tokenizer, ConversationScriptBackend(tiny_tokenizer, scripts)
    )
    with caplog.at_level("WARNING"):
        run_batch(engine, batch)
    assert caplog.text.count("the dataset's raw_prompt_ids have 3 (different)") == 1
    assert "row 1" not in caplog.text


def test_rows_naming_unknown_tools_or_interactions_raise(tiny_tokenizer):
    engine = AsyncRolloutEngine(
        rollout_config(), tiny_tokenizer, ConversationScriptBackend(tiny_tokenizer, {}),
        make_tools()
    )
    with pytest.raises(
        ValueError,
        match=r"row 0: tools_kwargs names tools \['search'\] that "
        r"are not loaded \(loaded: echo, reverse, wrap",
    ):
        run_batch(engine, prompts_batch(1, tools_kwargs={"search": {}}))
    with pytest.raises(KeyError, match="raw_prompt"):
        run_batch(engine, DataProto.from_dict(non_tensors={"x": [1]}))




class SlowTool(RecordingTool):
    def __init__(self, name, delay):
        super().__init__(name)
        self.delay = delay

    async def execute(self, instance_id, parameters, **kwargs):
        self.events.append(("execute", instance_id))
        await asyncio.sleep(self.delay)
        return (await super().execute(instance_id, parameters))[0], 0.0, {}


def _straggler_engine(tiny_tokenizer, rate, delay):
    # conv-0..7 answer at once; conv-8 and conv-9 call a slow tool first
    scripts = {k: ["done<|im_end|>"] for k in range(8)}
    scripts.update({k: [call_text("slow", "x") + "<|im_end|>", "done<|im_end|>"]
                    for k in (8, 9)})
    tools = {"slow": SlowTool("slow", delay)}
    engine = AsyncRolloutEngine(
        rollout_config(f"over_sample_rate={rate}"), tiny_tokenizer,
        ConversationScriptBackend(tiny_tokenizer, scripts), tools,
    )
    return engine, tools["slow"]


def test_over_sample_rate_cancels_the_stragglers_once_enough_finished(tiny_tokenizer):
    import time

    engine, slow = _straggler_engine(tiny_tokenizer, 0.2, delay=60)
    started = time.perf_counter()
    out = run_batch(engine, prompts_batch(10))
    assert time.perf_counter() - started < 10  # did not wait for the 60 s tool
    states = list(out.non_tensor_batch["request_state"])
    assert states == ["completed"] * 8 + ["failed"] * 2  # ceil(0.8 x 10) = 8 kept
    assert out.meta_info["metrics"]["rollout/aborted"] == 2
    assert out.meta_info["metrics"]["rollout/failed"] == 0
    assert out.batch["loss_mask"][8:].sum() == 0 and out.batch["loss_mask"][:8].sum() > 0
    # the cancelled requests still ran their tools' end calls
    assert sorted(slow.instances("release")) == sorted(slow.instances("create"))
    # at most conv-8 and conv-9 called it: the cut may land before their tool turn started
    # (eight quick requests can finish first), so 0, 1 or 2 calls all happen
    assert len(slow.instances("execute")) <= 2


def test_over_sample_rate_never_cuts_validation_or_a_rate_of_zero(tiny_tokenizer):
    for rate, validate in ((0.2, True), (0.0, False)):
        engine, _ = _straggler_engine(tiny_tokenizer, rate, delay=0.2)
        batch = prompts_batch(10)
        batch.meta_info["validate"] = validate
        out = run_batch(engine, batch)
        assert list(out.non_tensor_batch["request_state"]) == ["completed"] * 10
        assert out.meta_info["metrics"]["rollout/aborted"] == 0
