"""AsyncRolloutEngine with a scripted backend: token-in/token-out and the output layout."""

from __future__ import annotations

import asyncio
import copy
import threading

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.config import load_config
from agentrl.reward import load_reward_manager
from agentrl.rollout import AsyncRolloutEngine, AsyncRolloutRequest
from agentrl.testing.rollout import (
    PROMPT_LENGTH,
    RESPONSE_LENGTH,
    ConversationScriptBackend,
    call_text,
    expected_ids,
    make_tools,
    prompts_batch,
    rollout_config,
    run_batch,
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


@pytest.fixture(scope="module")
def config_n2():
    """The property's config, composed once: composing it (load_config) was 94% of the
    property's time, 30 times over."""
    return rollout_config("n=2")


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(conversations=st.lists(conversation, min_size=1, max_size=3))
def test_property_token_in_token_out(tiny_tokenizer, config_n2, conversations):
    scripts = {}
    for k, (turns, final) in enumerate(conversations):
        scripts[k] = [
            prefix + "\n".join(call_text(n, t, compact) for n, t, compact in calls) + "<|im_end|>"
            for prefix, calls in turns
        ] + [final + "<|im_end|>"]
    backend = ConversationScriptBackend(tiny_tokenizer, scripts)
    tools = make_tools()
    engine = AsyncRolloutEngine(copy.deepcopy(config_n2), tiny_tokenizer, backend, tools)
    requests: list[AsyncRolloutRequest] = []
    out = run_batch(engine, prompts_batch(len(conversations)), requests)

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
        written = req.written_messages()  # compact calls as the model wrote them
        assert req.input_ids == expected_ids(tiny_tokenizer, written, req.tool_schemas)
        assert req.metrics.tokenization == "match"
        turns, _ = conversations[req.batch_data_id]
        assert req.metrics.assistant_turns == len(turns) + 1
        assert sum(req.metrics.tool_calls.values()) == sum(len(c) for _, c in turns)
        # what ran is what the messages say, compact calls included
        assert [[(c["function"]["name"], c["function"]["arguments"]["text"])
                 for c in m["tool_calls"]] for m in req.messages if "tool_calls" in m] == [
            [(n, t) for n, t, _ in calls] for _, calls in turns]  # fmt: skip

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
        ConversationScriptBackend(tiny_tokenizer, scripts),
        tools,
    )
    batch = prompts_batch(2, tools_kwargs={"wrap": {}}, uid=["u0", "u1"])
    batch.meta_info["global_steps"] = 3
    out = run_batch(engine, batch)
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
        "rollout_versions": (4, R),
        "step_rewards": (4, R),
    }
    # the version the backend reported on every model token, -1 on tool tokens and padding
    versions, model = out.batch["rollout_versions"], out.batch["response_mask"].bool()
    assert (versions[model] == 0).all() and (versions[~model] == -1).all()
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
        "infra_error",
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

    cfg = load_config()  # verl's reward: the score alone
    manager = load_reward_manager(cfg.reward_model, cfg.custom_reward_function, tiny_tokenizer)
    assert manager(out).sum(-1).tolist() == [1.0, 1.0, 0.0, 0.0]
    cfg = load_config(overrides=["reward_model.tool_reward_weight=1"])
    manager = load_reward_manager(cfg.reward_model, cfg.custom_reward_function, tiny_tokenizer)
    scored = manager(out, return_dict=True)
    totals = scored["reward_tensor"].sum(-1).tolist()
    assert totals == [1.25, 1.25, 0.25, 0.25]  # arithmetic score + weighted calc_reward
    last = int(torch.nonzero(out.batch["attention_mask"][0, P:]).max())
    assert scored["reward_tensor"][0, last].item() == 1.25
    # with step_reward_weight the step reward (0.5 x 2) joins at the end of the calling turn
    cfg = load_config(overrides=["reward_model.step_reward_weight=2",
                                 "reward_model.tool_reward_weight=1"])
    manager = load_reward_manager(cfg.reward_model, cfg.custom_reward_function, tiny_tokenizer)
    scored = manager(out, return_dict=True)
    assert scored["reward_tensor"].sum(-1).tolist() == [2.25, 2.25, 0.25, 0.25]
    assert scored["reward_tensor"][0, call_end].item() == 1.0
    assert scored["reward_extra_info"]["step_reward"] == [1.0, 1.0, 0.0, 0.0]


def test_single_turn_without_tools_and_validation_params(tiny_tokenizer):
    script = {0: [call_text("echo", "x") + "<|im_end|>"]}
    backend = ConversationScriptBackend(tiny_tokenizer, script)
    config = rollout_config("multi_turn.enable=false", "n=4", "temperature=0.7", "top_k=5")
    engine = AsyncRolloutEngine(config, tiny_tokenizer, backend, make_tools())
    out = run_batch(engine, prompts_batch(1))
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
    assert len(run_batch(engine, validation)) == 1  # val_kwargs.n
    assert backend.calls[0]["temperature"] == 0.0 and backend.calls[0]["top_k"] == -1


def test_blocking_generate_sequences_reuses_one_loop(tiny_tokenizer):
    loops = []

    class LoopRecorder(ConversationScriptBackend):
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
    # closed: the loop and its thread are gone; the next blocking call starts a new loop
    assert loops[0].is_closed()
    assert "agentrl-rollout" not in {t.name for t in threading.enumerate()}
    try:
        engine.generate_sequences(prompts_batch(1))
    finally:
        engine.close()
    assert len(loops) == 3 and loops[2] is not loops[0] and loops[2].is_closed()


def test_backend_without_generate_is_rejected(tiny_tokenizer):
    with pytest.raises(TypeError, match="backend object has no generate"):
        AsyncRolloutEngine(rollout_config(), tiny_tokenizer, object())




@pytest.mark.parametrize("mode", ["own", "all", "none"])
def test_tool_schemas_in_prompt(tiny_tokenizer, mode):
    """`multi_turn.tool_schemas_in_prompt`: which schemas the prompt shows; with `none` the
    prompt is the plain chat template, and the tools still run when called."""
    backend = ConversationScriptBackend(tiny_tokenizer, {0: [call_text("echo", "hi") + "<|im_end|>",
                                                   "done<|im_end|>"]})
    tools = make_tools()
    cfg = rollout_config(f"multi_turn.tool_schemas_in_prompt={mode}")
    requests: list[AsyncRolloutRequest] = []
    out = run_batch(AsyncRolloutEngine(cfg, tiny_tokenizer, backend, tools),
              prompts_batch(1, tools_kwargs={"echo": {}}), requests)
    (req,) = requests
    shown = [s["function"]["name"] for s in req.tool_schemas]
    assert shown == {"own": ["echo"], "all": sorted(tools), "none": []}[mode]
    prompt = tiny_tokenizer.decode(req.input_ids[: req.prompt_length])
    assert ('"name": "echo"' in prompt) == (mode != "none")
    if mode == "none":
        plain = tiny_tokenizer.apply_chat_template(
            [{"role": "user", "content": "Question conv-0?"}], add_generation_prompt=True)
        plain = plain["input_ids"] if hasattr(plain, "keys") else plain
        assert req.input_ids[: req.prompt_length] == list(plain)
    assert req.metrics.tool_calls == {"echo": 1} and len(tools["echo"].instances("execute")) == 1
    assert out.meta_info["metrics"]["rollout/failed"] == 0


# ---------------------------------------------------------------------- the timeline


def test_a_traced_batch_returns_each_requests_states_and_calls(tiny_tokenizer):
    """meta_info["trace"] (trainer.trace): a track per request with a span per state, the
    generation attempts (a failed one with its error) and the tool calls, the calls of one
    turn on lanes of their own; without the flag nothing is recorded."""
    from agentrl.testing.rollout import RecordingTool
    from agentrl.utils.trace import TRACE_EVENTS

    def broken(text):
        raise RuntimeError("the tool is down")

    tools = make_tools() | {"boom": RecordingTool("boom", broken)}
    turn = call_text("echo", "hi") + call_text("reverse", "ab") + "<|im_end|>"
    scripts = {0: [turn, "done<|im_end|>"], 1: [call_text("boom", "x") + "<|im_end|>", "ok"]}
    batch = prompts_batch(2, tools_kwargs={"echo": {}, "reverse": {}, "boom": {}})
    backend = ConversationScriptBackend(tiny_tokenizer, scripts, fail={1: 1})
    engine = AsyncRolloutEngine(rollout_config("n=1"), tiny_tokenizer, backend, tools)
    assert TRACE_EVENTS not in run_batch(engine, batch).meta_info

    batch.meta_info["trace"] = True
    engine.backend = ConversationScriptBackend(tiny_tokenizer, scripts, fail={1: 1})
    out = run_batch(engine, batch)
    rows = {}
    for process, track, name, ts, dur, args in out.meta_info.pop(TRACE_EVENTS):
        assert process.startswith("rollout (pid ") and dur >= 0
        rows.setdefault(track, []).append((ts, -dur, name, args))
    ids = {int(t.split("-")[-2]): t for t in rows if " call " not in t}  # "{batch}-{row}-{k}"
    assert set(rows) == {ids[0], ids[0] + " call 1", ids[1]}
    first = [(name, args) for _, _, name, args in sorted(rows[ids[0]])]
    assert [n for n, _ in first] == ["request", "PENDING", "RUNNING", "generate", "TOOL_CALLING",
                                     "tool", "RUNNING", "generate", "end_plugins"]  # fmt: skip
    assert first[0][1]["state"] == "COMPLETED" and first[0][1]["turns"] == 4
    assert first[3][1]["server"] == "ConversationScriptBackend"
    assert first[3][1]["policy_version"] == 0
    assert first[5][1]["tool"] == "echo" and first[5][1]["outcome"] == "ok"
    (lane,) = [(name, args) for _, _, name, args in rows[ids[0] + " call 1"]]
    assert lane[0] == "tool" and lane[1]["tool"] == "reverse"  # beside echo: they overlap
    second = [(name, args) for _, _, name, args in sorted(rows[ids[1]])]
    generates = [args for name, args in second if name == "generate"]
    assert [g.get("error") for g in generates] == ["BackendError", None, None]  # retried
    (tool,) = [args for name, args in second if name == "tool"]
    assert tool["tool"] == "boom" and tool["outcome"] not in ("ok", None)


# ---------------------------------------------------------------------- what runs


@pytest.mark.parametrize("between", ["", "\n", " then "])
def test_the_calls_that_run_are_the_messages_tool_calls(tiny_tokenizer, between):
    """Calls written back to back (no newline between, which the template writes) or with
    text between them run, and the turn's message says so: its tool_calls are the calls
    that ran, their ids the tool messages'; the tokens stay the model's (a match)."""
    turn = "Both.\n" + call_text("echo", "hi") + between + call_text("reverse", "ab")
    script = [turn + "<|im_end|>", "done<|im_end|>"]
    backend = ConversationScriptBackend(tiny_tokenizer, {0: script})
    tools = make_tools()
    engine = AsyncRolloutEngine(rollout_config("n=1"), tiny_tokenizer, backend, tools)
    requests: list[AsyncRolloutRequest] = []
    out = run_batch(engine, prompts_batch(1, tools_kwargs={"echo": {}, "reverse": {}}), requests)
    (req,) = requests
    assert [tools[name].instances("execute") for name in ("echo", "reverse")] == [
        [req.tool_instances["echo"]], [req.tool_instances["reverse"]]]  # fmt: skip
    assistant, *answers = req.messages[1:4]
    assert assistant == {"role": "assistant", "content": "Both.", "tool_calls": [
        {"id": "call_1_0", "type": "function",
         "function": {"name": "echo", "arguments": {"text": "hi"}}},
        {"id": "call_1_1", "type": "function",
         "function": {"name": "reverse", "arguments": {"text": "ab"}}}]}  # fmt: skip
    assert [(m["role"], m["tool_call_id"], m["content"]) for m in answers] == [
        ("tool", "call_1_0", "hi"), ("tool", "call_1_1", "ba\n\t ")]  # fmt: skip
    assert out.non_tensor_batch["messages"][0][1] == assistant
    assert req.metrics.tokenization == "match"
    assert req.input_ids == expected_ids(tiny_tokenizer, req.written_messages(), req.tool_schemas)
