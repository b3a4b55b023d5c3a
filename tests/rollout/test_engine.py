"""AsyncRolloutEngine with a scripted backend: token-in/token-out, faults, limits, output."""

from __future__ import annotations

import asyncio
import json
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.config import load_config
from agentrl.interactions import BaseInteraction
from agentrl.protocol import DataProto
from agentrl.reward import load_reward_manager
from agentrl.rollout import AsyncRolloutEngine, AsyncRolloutRequest
from agentrl.rollout.backends import BackendError, GenerationOutput
from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse

PROMPT_LENGTH, RESPONSE_LENGTH = 1024, 2048


def rollout_config(*overrides: str):
    cfg = load_config(
        overrides=[
            f"data.max_prompt_length={PROMPT_LENGTH}",
            f"data.max_response_length={RESPONSE_LENGTH}",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=8",
            "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=100000",
            "actor_rollout_ref.rollout.multi_turn.retry_backoff=0.001",
            *[f"actor_rollout_ref.rollout.{o}" for o in overrides],
        ]
    )
    return cfg.actor_rollout_ref.rollout


def schema(name: str) -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema.model_validate(
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"the {name} tool",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            },
        }
    )


class RecordingTool(BaseTool):
    """Answers with `respond(text)`; records the lifecycle calls of every instance."""

    def __init__(
        self, name: str, respond=lambda text: text, reward: float = 0.0, final_reward: float = 0.0
    ):
        super().__init__({}, schema(name))
        self.respond, self.reward, self.final_reward = respond, reward, final_reward
        self.events: list[tuple[str, str]] = []
        self.running = self.max_running = 0

    async def create(self, instance_id=None, **kwargs):
        self.events.append(("create", instance_id))
        return await super().create(instance_id, **kwargs)

    async def execute(self, instance_id, parameters, **kwargs):
        self.events.append(("execute", instance_id))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await asyncio.sleep(0)
            return (
                ToolResponse(text=await _maybe_await(self.respond(parameters["text"]))),
                self.reward,
                {},
            )
        finally:
            self.running -= 1

    async def calc_reward(self, instance_id, **kwargs):
        self.events.append(("calc_reward", instance_id))
        return self.final_reward

    async def release(self, instance_id, **kwargs):
        self.events.append(("release", instance_id))
        await super().release(instance_id, **kwargs)

    def instances(self, event: str) -> list[str]:
        return [i for e, i in self.events if e == event]


async def _maybe_await(value):
    return await value if asyncio.iscoroutine(value) else value


class ScriptedBackend:
    """Plays a script per conversation: `scripts[k]` is the list of model turn texts of the
    conversation whose user message contains `conv-k`; its turn index is the number of
    assistant turns already in the input. Records every output and the calls in flight."""

    def __init__(
        self,
        tokenizer,
        scripts: dict[int, list[str]],
        fail: dict | None = None,
        finish_reason: str = "stop",
    ):
        self.tokenizer, self.scripts, self.fail = tokenizer, scripts, dict(fail or {})
        self.finish_reason = finish_reason
        self.outputs: dict[tuple[int, str], list[list[int]]] = {}
        self.calls: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self.aborted: list[str] = []

    async def generate(self, input_ids, sampling_params, request_id):
        self.calls.append(dict(sampling_params))
        text = self.tokenizer.decode(input_ids, skip_special_tokens=False)
        conversation = int(re.search(r"conv-(\d+)", text).group(1))
        if self.fail.get(conversation):
            self.fail[conversation] -= 1
            raise BackendError(f"scripted failure of conv-{conversation}", retryable=True)
        turn = text.count("<|im_start|>assistant") - 1
        script = self.scripts[conversation]
        out_text = script[min(turn, len(script) - 1)]
        ids = self.tokenizer.encode(out_text, add_special_tokens=False)
        ids = ids[: sampling_params["max_new_tokens"]]
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.001)
        self.in_flight -= 1
        prompt = text.split("<|im_start|>assistant")[0]
        self.outputs.setdefault((conversation, request_id.split("-t")[0]), []).append(ids)
        log_probs = [-0.25 - 0.001 * i for i in range(len(ids))]
        return GenerationOutput(
            ids, out_text, self.finish_reason, log_probs, meta_info={"prompt": prompt}
        )

    async def abort(self, request_id):
        self.aborted.append(request_id)


def call_text(name: str, text: str, compact: bool = False) -> str:
    body = {"name": name, "arguments": {"text": text}}
    if compact:
        return "<tool_call>" + json.dumps(body, separators=(",", ":")) + "</tool_call>"
    return "<tool_call>\n" + json.dumps(body, ensure_ascii=False) + "\n</tool_call>"


def prompts_batch(n_prompts: int, tools_kwargs=None, **columns) -> DataProto:
    non_tensors = {
        "raw_prompt": [
            [{"role": "user", "content": f"Question conv-{k}?"}] for k in range(n_prompts)
        ],
        "tools_kwargs": [tools_kwargs or {} for _ in range(n_prompts)],
        "data_source": ["agentrl/arithmetic"] * n_prompts,
        "reward_model": [{"ground_truth": "42"} for _ in range(n_prompts)],
        "index": list(range(n_prompts)),
        **columns,
    }
    return DataProto.from_dict(non_tensors=non_tensors)


def expected_ids(tokenizer, request_messages, tools) -> list[int]:
    """The template's rendering of the final messages, minus the newline after the last
    <|im_end|> (generation stops at <|im_end|>)."""
    text = tokenizer.apply_chat_template(request_messages, tools=tools or None, tokenize=False)
    assert text.endswith("<|im_end|>\n")
    return tokenizer.encode(text[:-1], add_special_tokens=False)


def run(engine, batch, collected: list | None = None) -> DataProto:
    return asyncio.run(
        engine.agenerate_sequences(
            batch, on_request_done=None if collected is None else collected.append
        )
    )


# ---------------------------------------------------------------------- property test

PIECES = [
    "a",
    "Zeta",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    "\r\n",
    "\u00a0",
    "é",
    "中文",
    "🙂",
    "{",
    "}",
    '"',
    "\\",
    "<",
    ">",
    "&",
    "<tool_call>",
    "</tool_response>",
    "<|im_end|>",
    "<|endoftext|>",
    "0.5",
    "-",
    "#",
]
awkward = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)
tool_names = st.sampled_from(["echo", "reverse", "wrap"])
model_turn = st.tuples(
    st.sampled_from(["", "Let me check.\n", "OK: "]),
    st.lists(st.tuples(tool_names, awkward, st.booleans()), min_size=1, max_size=3),
)
conversation = st.tuples(
    st.lists(model_turn, max_size=4),
    st.sampled_from(["Done.", "The answer is <answer>42</answer>", "ok\n\nx"]),
)


def make_tools() -> dict[str, RecordingTool]:
    return {
        "echo": RecordingTool("echo"),
        "reverse": RecordingTool("reverse", lambda t: t[::-1] + "\n\t "),
        "wrap": RecordingTool("wrap", lambda t: f"  [{t}]\n\n", reward=0.5),
    }


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(conversations=st.lists(conversation, min_size=1, max_size=3))
def test_property_token_in_token_out(tiny_tokenizer, conversations):
    scripts = {}
    for k, (turns, final) in enumerate(conversations):
        scripts[k] = [
            prefix + "\n".join(call_text(n, t, compact) for n, t, compact in calls) + "<|im_end|>"
            for prefix, calls in turns
        ] + [final + "<|im_end|>"]
    backend = ScriptedBackend(tiny_tokenizer, scripts)
    tools = make_tools()
    engine = AsyncRolloutEngine(rollout_config("n=2"), tiny_tokenizer, backend, tools)
    requests: list[AsyncRolloutRequest] = []
    out = run(engine, prompts_batch(len(conversations)), requests)

    assert len(out) == 2 * len(conversations)
    assert out.meta_info["metrics"]["rollout/failed"] == 0
    for req in requests:
        n = len(req.input_ids)
        assert [
            len(req.attention_mask),
            len(req.position_ids),
            len(req.loss_mask),
            len(req.rollout_log_probs),
        ] == [n] * 4
        assert req.position_ids == list(range(n))
        model_ids = [t for t, m in zip(req.input_ids, req.loss_mask, strict=True) if m]
        outputs = backend.outputs[(req.batch_data_id, req.request_id)]
        assert model_ids == [t for ids in outputs for t in ids]
        assert req.input_ids == expected_ids(tiny_tokenizer, req.messages, req.tool_schemas)
        assert req.metrics.tokenization == "match"
        turns, _ = conversations[req.batch_data_id]
        assert req.metrics.assistant_turns == len(turns) + 1
        assert sum(req.metrics.tool_calls.values()) == sum(len(c) for _, c in turns)

    # the output rows line up with repeat(n, interleave=True) and hold the same tokens
    order = [
        (r.batch_data_id, r.rollout_offset)
        for r in sorted(requests, key=lambda r: (r.batch_data_id, r.rollout_offset))
    ]
    assert order == [(k, j) for k in range(len(conversations)) for j in range(2)]
    for row, req in enumerate(sorted(requests, key=lambda r: (r.batch_data_id, r.rollout_offset))):
        mask = out.batch["attention_mask"][row].bool()
        assert out.batch["input_ids"][row][mask].tolist() == req.input_ids
        assert out.batch["loss_mask"][row][mask].tolist() == req.loss_mask
        log_probs = out.batch["rollout_log_probs"][row]
        assert log_probs[out.batch["response_mask"][row].bool()].tolist() == pytest.approx(
            [p for p, m in zip(req.rollout_log_probs, req.loss_mask, strict=True) if m]
        )
        assert out.non_tensor_batch["index"][row] == req.batch_data_id
    # every instance was created once, rewarded, then released
    for tool in tools.values():
        assert sorted(tool.instances("create")) == sorted(tool.instances("release"))
        assert len(set(tool.instances("create"))) == len(tool.instances("create")) == len(out)


# ---------------------------------------------------------------------- output layout


def test_output_keys_shapes_and_reward_manager(tiny_tokenizer):
    scripts = {
        0: [call_text("wrap", "x") + "<|im_end|>", "<answer>42</answer><|im_end|>"],
        1: ["<answer>41</answer><|im_end|>"],
    }
    tools = make_tools()
    tools["wrap"].final_reward = 0.25
    engine = AsyncRolloutEngine(
        rollout_config("n=2", "response_length=64"),
        tiny_tokenizer,
        ScriptedBackend(tiny_tokenizer, scripts),
        tools,
    )
    batch = prompts_batch(2, tools_kwargs={"wrap": {}}, uid=["u0", "u1"])
    batch.meta_info["global_steps"] = 3
    out = run(engine, batch)
    P, R = PROMPT_LENGTH, 64
    assert {k: tuple(v.shape) for k, v in out.batch.items()} == {
        "prompts": (4, P),
        "responses": (4, R),
        "input_ids": (4, P + R),
        "attention_mask": (4, P + R),
        "position_ids": (4, P + R),
        "loss_mask": (4, P + R),
        "response_mask": (4, R),
        "rollout_log_probs": (4, R),
        "step_rewards": (4, R),
    }
    assert set(out.non_tensor_batch) == {
        "raw_prompt",
        "tools_kwargs",
        "data_source",
        "reward_model",
        "index",
        "uid",
        "messages",
        "reward_scores",
        "num_turns",
        "__num_turns__",
        "finish_reason",
        "truncation",
        "request_state",
        "rollout_metrics",
    }
    assert list(out.non_tensor_batch["uid"]) == ["u0", "u0", "u1", "u1"]
    assert list(out.non_tensor_batch["num_turns"]) == [4, 4, 2, 2]
    assert list(out.non_tensor_batch["finish_reason"]) == ["stop"] * 4
    called = {"wrap": 0.25, "step_rewards": {"wrap": [0.5]}}  # calc_reward and execute's step
    assert list(out.non_tensor_batch["reward_scores"]) == [called] * 2 + [{"wrap": 0.25}] * 2
    assert out.meta_info["global_steps"] == 3
    # position ids count attended tokens; padding is pad id with attention 0
    first = out.batch["attention_mask"][0]
    assert out.batch["position_ids"][0][first.bool()].tolist() == list(range(int(first.sum())))
    assert (out.batch["prompts"][0][~first[:P].bool()] == tiny_tokenizer.pad_token_id).all()
    # the step reward (0.5 from "wrap") sits on the last token of the calling turn
    response_mask = out.batch["response_mask"][0]
    call_end = (
        int(torch.nonzero(response_mask).squeeze(-1)[0])
        + len(tiny_tokenizer.encode(scripts[0][0], add_special_tokens=False))
        - 1
    )
    assert torch.nonzero(out.batch["step_rewards"][0]).squeeze(-1).tolist() == [call_end]
    assert out.batch["step_rewards"][0, call_end].item() == 0.5

    cfg = load_config()
    manager = load_reward_manager(cfg.reward_model, cfg.custom_reward_function, tiny_tokenizer)
    scored = manager(out, return_dict=True)
    totals = scored["reward_tensor"].sum(-1).tolist()
    assert totals == [1.25, 1.25, 0.25, 0.25]  # arithmetic score + weighted calc_reward
    last = int(torch.nonzero(out.batch["attention_mask"][0, P:]).max())
    assert scored["reward_tensor"][0, last].item() == 1.25
    # with step_reward_weight the step reward (0.5 x 2) joins at the end of the calling turn
    cfg = load_config(overrides=["reward_model.step_reward_weight=2"])
    manager = load_reward_manager(cfg.reward_model, cfg.custom_reward_function, tiny_tokenizer)
    scored = manager(out, return_dict=True)
    assert scored["reward_tensor"].sum(-1).tolist() == [2.25, 2.25, 0.25, 0.25]
    assert scored["reward_tensor"][0, call_end].item() == 1.0
    assert scored["reward_extra_info"]["step_reward"] == [1.0, 1.0, 0.0, 0.0]


def test_single_turn_without_tools_and_validation_params(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer, {0: [call_text("echo", "x") + "<|im_end|>"]})
    config = rollout_config("multi_turn.enable=false", "n=4", "temperature=0.7", "top_k=5")
    engine = AsyncRolloutEngine(config, tiny_tokenizer, backend, make_tools())
    out = run(engine, prompts_batch(1))
    assert len(out) == 4
    assert out.meta_info["metrics"]["rollout/tool_calls"] == 0  # no tool state machine
    assert out.non_tensor_batch["messages"][0][-1]["role"] == "assistant"
    assert backend.calls[0] == {
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": 5,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "stop_token_ids": [tiny_tokenizer.eos_token_id],
        "max_new_tokens": RESPONSE_LENGTH,
    }
    validation = prompts_batch(1)
    validation.meta_info["validate"] = True
    backend.calls.clear()
    assert len(run(engine, validation)) == 1  # val_kwargs.n
    assert backend.calls[0]["temperature"] == 0.0 and backend.calls[0]["top_k"] == -1


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
    backend = ScriptedBackend(tiny_tokenizer, scripts, fail={2: 100})
    config = rollout_config("max_retries=2", "multi_turn.tool_timeout=0.2")
    engine = AsyncRolloutEngine(config, tiny_tokenizer, backend, tools)
    requests: list[AsyncRolloutRequest] = []
    out = run(engine, prompts_batch(3), requests)

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


def test_non_retryable_backend_error_fails_at_once(tiny_tokenizer):
    class Broken(ScriptedBackend):
        async def generate(self, input_ids, sampling_params, request_id):
            self.calls.append(sampling_params)
            raise BackendError("400: bad request", retryable=False)

    backend = Broken(tiny_tokenizer, {})
    out = run(
        AsyncRolloutEngine(rollout_config("max_retries=5"), tiny_tokenizer, backend),
        prompts_batch(1),
    )
    assert len(backend.calls) == 1
    assert out.meta_info["metrics"]["rollout/backend_retries"] == 0
    assert out.non_tensor_batch["request_state"][0] == "failed"


def test_backend_timeout_is_retried_and_aborted(tiny_tokenizer):
    class Slow(ScriptedBackend):
        async def generate(self, input_ids, sampling_params, request_id):
            await asyncio.sleep(60)

    backend = Slow(tiny_tokenizer, {})
    config = rollout_config("max_retries=1", "request_timeout=0.05")
    out = run(AsyncRolloutEngine(config, tiny_tokenizer, backend), prompts_batch(1))
    assert out.meta_info["metrics"]["rollout/backend_retries"] == 1
    assert len(backend.aborted) == 2
    assert out.non_tensor_batch["request_state"][0] == "failed"


def test_cancellation_still_releases_every_instance(tiny_tokenizer):
    tools = {"hang": HangingTool("hang")}
    scripts = {k: [call_text("hang", "x") + "<|im_end|>"] for k in range(3)}
    engine = AsyncRolloutEngine(
        rollout_config(), tiny_tokenizer, ScriptedBackend(tiny_tokenizer, scripts), tools
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
    out = run(
        AsyncRolloutEngine(
            rollout_config(), tiny_tokenizer, ScriptedBackend(tiny_tokenizer, scripts), tools
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
    out = run(
        AsyncRolloutEngine(
            config, tiny_tokenizer, ScriptedBackend(tiny_tokenizer, scripts), make_tools()
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
    # the turn with a malformed call is kept verbatim, so the messages still render to it
    assert out.non_tensor_batch["messages"][0][1] == {
        "role": "assistant",
        "content": turn[: -len("<|im_end|>")],
    }
    assert requests[0].metrics.tokenization == "match"


def test_invalid_arguments_reach_the_model(tiny_tokenizer):
    turn = '<tool_call>\n{"name": "echo", "arguments": {"text": 5}}\n</tool_call><|im_end|>'
    out = run(
        AsyncRolloutEngine(
            rollout_config(),
            tiny_tokenizer,
            ScriptedBackend(tiny_tokenizer, {0: [turn, "ok<|im_end|>"]}),
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
            ScriptedBackend(tiny_tokenizer, loop_forever),
            make_tools(),
        )
        requests: list[AsyncRolloutRequest] = []
        out = run(engine, prompts_batch(1), requests)
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
        ScriptedBackend(tiny_tokenizer, long_tool),
        make_tools(),
    )
    out = run(engine, prompts_batch(1), requests)
    req = requests[0]
    assert req.response_length == 40
    assert {len(req.input_ids), len(req.loss_mask), len(req.rollout_log_probs)} == {
        req.prompt_length + 40
    }
    assert (req.finish_reason.value, req.truncation) == ("length", "response_length")
    assert out.non_tensor_batch["truncation"][0] == "response_length"
    assert out.meta_info["metrics"]["rollout/truncated"] == 1


def test_max_model_len_is_the_binding_limit(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer, {0: ["word " * 100 + "<|im_end|>"]})
    requests: list[AsyncRolloutRequest] = []
    engine = AsyncRolloutEngine(rollout_config("max_model_len=1100"), tiny_tokenizer, backend)
    run(engine, prompts_batch(1), requests)
    assert backend.calls[0]["max_new_tokens"] == 1100 - requests[0].prompt_length
    assert requests[0].truncation is None  # the scripted output fit


def test_per_turn_cap_and_length_finish(tiny_tokenizer):
    backend = ScriptedBackend(
        tiny_tokenizer, {0: ["word " * 50 + "<|im_end|>"]}, finish_reason="length"
    )
    requests: list[AsyncRolloutRequest] = []
    engine = AsyncRolloutEngine(
        rollout_config("multi_turn.max_new_tokens_per_turn=7"),
        tiny_tokenizer,
        backend,
        make_tools(),
    )
    run(engine, prompts_batch(1), requests)
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
    out = run(
        AsyncRolloutEngine(
            config, tiny_tokenizer, ScriptedBackend(tiny_tokenizer, scripts), make_tools()
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
    backend = ScriptedBackend(tiny_tokenizer, scripts)
    config = rollout_config("max_concurrent_requests=3", "multi_turn.max_concurrent_tool_calls=2")
    run(AsyncRolloutEngine(config, tiny_tokenizer, backend, tools), prompts_batch(8))
    assert backend.max_in_flight == 3
    assert tools["echo"].max_running == 2


def test_prompt_longer_than_prompt_length_fails_the_request(tiny_tokenizer):
    batch = prompts_batch(2)
    batch.non_tensor_batch["raw_prompt"][1] = [{"role": "user", "content": "conv-1 " + "w " * 600}]
    scripts = {0: ["ok<|im_end|>"], 1: ["ok<|im_end|>"]}
    out = run(
        AsyncRolloutEngine(
            rollout_config("prompt_length=300"),
            tiny_tokenizer,
            ScriptedBackend(tiny_tokenizer, scripts),
        ),
        batch,
    )
    assert list(out.non_tensor_batch["request_state"]) == ["completed", "failed"]
    assert out.batch["prompts"].shape == (2, 300)


def test_prompt_rendered_differently_from_the_dataset_is_warned_once(tiny_tokenizer, caplog):
    batch = prompts_batch(2, raw_prompt_ids=[[1, 2, 3], [4]])
    scripts = {0: ["ok<|im_end|>"], 1: ["ok<|im_end|>"]}
    engine = AsyncRolloutEngine(
        rollout_config(), tiny_tokenizer, ScriptedBackend(tiny_tokenizer, scripts)
    )
    with caplog.at_level("WARNING"):
        run(engine, batch)
    assert caplog.text.count("the dataset's raw_prompt_ids have 3 (different)") == 1
    assert "row 1" not in caplog.text


def test_rows_naming_unknown_tools_or_interactions_raise(tiny_tokenizer):
    engine = AsyncRolloutEngine(
        rollout_config(), tiny_tokenizer, ScriptedBackend(tiny_tokenizer, {}), make_tools()
    )
    with pytest.raises(
        ValueError,
        match=r"row 0: tools_kwargs names tools \['search'\] that "
        r"are not loaded \(loaded: echo, reverse, wrap",
    ):
        run(engine, prompts_batch(1, tools_kwargs={"search": {}}))
    with pytest.raises(KeyError, match="raw_prompt"):
        run(engine, DataProto.from_dict(non_tensors={"x": [1]}))


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
    backend = ScriptedBackend(tokenizer, {0: ["the answer  <|im_end|>"]})
    requests: list[AsyncRolloutRequest] = []
    config = rollout_config(f"multi_turn.tokenization_sanity_check_mode={mode}")
    out = run(AsyncRolloutEngine(config, tokenizer, backend), prompts_batch(1), requests)
    assert (requests[0].state.value, requests[0].metrics.tokenization) == (state, tokenization)
    assert out.meta_info["metrics"][f"rollout/tokenization/{tokenization}"] == 1
    assert bool(out.batch["response_mask"].sum()) == (state == "completed")


def test_token_drift_is_reported_but_not_failed(tiny_tokenizer):
    # ids the tokenizer would never produce for this text: "the" spelled letter by letter
    assert len(tiny_tokenizer.encode("the", add_special_tokens=False)) == 1
    spelled = [*tiny_tokenizer.convert_tokens_to_ids(list("the")), tiny_tokenizer.eos_token_id]

    class Spelling(ScriptedBackend):
        async def generate(self, input_ids, sampling_params, request_id):
            return GenerationOutput(spelled, "the", "stop", [0.0] * 4)

    requests: list[AsyncRolloutRequest] = []
    run(
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
    out = run(
        AsyncRolloutEngine(
            rollout_config(),
            tiny_tokenizer,
            ScriptedBackend(tiny_tokenizer, scripts),
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
        run(
            AsyncRolloutEngine(
                rollout_config(),
                tiny_tokenizer,
                ScriptedBackend(tiny_tokenizer, scripts),
                interactions={"again": interaction},
            ),
            prompts_batch(1, interaction_kwargs=[{"name": "other"}]),
        )


def test_blocking_generate_sequences_reuses_one_loop(tiny_tokenizer):
    loops = []

    class LoopRecorder(ScriptedBackend):
        async def generate(self, input_ids, sampling_params, request_id):
            loops.append(asyncio.get_running_loop())
            return await super().generate(input_ids, sampling_params, request_id)

    engine = AsyncRolloutEngine(
        rollout_config(), tiny_tokenizer, LoopRecorder(tiny_tokenizer, {0: ["ok<|im_end|>"]})
    )
    try:
        first = engine.generate_sequences(prompts_batch(1))
        second = engine.generate_sequences(prompts_batch(1))
    finally:
        engine.close()
    assert torch.equal(first.batch["responses"], second.batch["responses"])
    assert len(loops) == 2 and loops[0] is loops[1]


def test_backend_without_generate_is_rejected(tiny_tokenizer):
    with pytest.raises(TypeError, match="backend object has no generate"):
        AsyncRolloutEngine(rollout_config(), tiny_tokenizer, object())


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
        out = run(engine, prompts_batch(3, tools_kwargs={"calculator": {}}), requests)
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
        return run(engine, batch)

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
