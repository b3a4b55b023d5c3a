"""The tokenization check in a worker process (agentrl/rollout/check_offload.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from agentrl.models.chat import ChatRenderer
from agentrl.rollout import AsyncRolloutEngine, AsyncRolloutRequest
from agentrl.rollout.check_offload import (
    AUTO_MIN_REQUESTS,
    CHUNK,
    CheckOffload,
    check_offload_setting,
    should_offload,
)
from agentrl.rollout.token_check import run_check
from agentrl.testing.rollout import (
    ConversationScriptBackend,
    call_text,
    make_tools,
    prompts_batch,
    rollout_config,
    run_batch,
    token_check_cases,
)


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


@pytest.fixture(scope="module")
def offload(tiny_tokenizer):
    offload = CheckOffload(tiny_tokenizer)
    assert offload.start() and offload.wait_ready(120)
    yield offload
    offload.close()


def test_the_process_gives_the_inline_answer(offload, renderer, tiny_tokenizer):
    cases = token_check_cases(renderer, tiny_tokenizer)
    for mode in ("strict", "disable"):
        items = {kind: req.check_input(mode) for kind, req in cases.items()}

        async def check_all(items=items):
            return await asyncio.gather(*(offload.check(i, renderer) for i in items.values()))

        answered = offload.answered
        offloaded = dict(zip(items, asyncio.run(check_all()), strict=True))
        assert offload.answered > answered  # the worker answered
        assert offloaded == {kind: run_check(renderer, i) for kind, i in items.items()}
        assert offloaded["verbatim"].verbatim == (1,)  # the same turn checked as written
        if mode == "strict":
            assert {k: r.tokenization for k, r in offloaded.items()} == {
                "match": "match", "token_drift": "token_drift", "verbatim": "match",
                "strippable_drift": "strippable_drift", "text_drift": "text_drift"}  # fmt: skip


def test_a_killed_process_falls_back_inline(tiny_tokenizer, renderer, caplog):
    offload = CheckOffload(tiny_tokenizer)
    try:
        assert offload.start() and offload.wait_ready(120)
        req = token_check_cases(renderer, tiny_tokenizer)["text_drift"]
        item = req.check_input("strict")
        assert asyncio.run(offload.check(item, renderer)).tokenization == "text_drift"
        assert offload.answered == 1
        os.kill(offload._process.pid, signal.SIGKILL)
        offload._process.join(10)
        with caplog.at_level(logging.WARNING, "agentrl.rollout.check_offload"):
            result = asyncio.run(offload.check(item, renderer))
        assert result == run_check(renderer, item)  # answered here, nothing lost
        assert "checking them on the event loop" in caplog.text and not offload.running
        assert asyncio.run(offload.check(item, renderer)) == result  # inline until restarted
    finally:
        offload.close()


@pytest.mark.parametrize("room", [None, 0])  # 0: every call waits for the one in flight
def test_held_checks_queue_and_the_loop_takes_the_unsent_ones(offload, renderer, tiny_tokenizer,
                                                               room, monkeypatch):  # fmt: skip
    if room is not None:
        monkeypatch.setattr(offload, "_send_room", room)
    cases = token_check_cases(renderer, tiny_tokenizer)
    items = [req.check_input("strict") for req in cases.values()] * 20  # > CHUNK x IN_FLIGHT
    expected = [run_check(renderer, item) for item in items]

    async def check_all():
        checks = [asyncio.ensure_future(offload.check(i, renderer, hold=True)) for i in items]
        await asyncio.sleep(0)  # every check waits for the worker: none ran here
        assert len(offload._waiting) + offload._in_worker == len(items)
        offload.start_stealing(renderer)  # the batch's last request: the loop takes the rest
        return await asyncio.gather(*checks)

    answered = offload.answered
    assert asyncio.run(check_all()) == expected
    by_worker = offload.answered - answered
    assert CHUNK <= by_worker < len(items)  # the worker answered its calls, the loop the rest
    assert not offload._waiting and offload._in_worker == 0


def test_prepare_starts_the_process_for_a_batch_that_would_use_it(tiny_tokenizer):
    for setting, requests, started in (("auto", AUTO_MIN_REQUESTS, True),
                                       ("auto", AUTO_MIN_REQUESTS - 1, False),
                                       ("false", 10**4, False), ("true", 1, True)):  # fmt: skip
        engine = AsyncRolloutEngine(
            rollout_config(f"multi_turn.tokenization_sanity_check_offload={setting}"),
            tiny_tokenizer, ConversationScriptBackend(tiny_tokenizer, {}),
            make_tools())  # fmt: skip
        try:
            assert engine.prepare(requests) is started
            assert engine.check_offload.running is started
        finally:
            engine.close()


def test_a_tokenizer_that_cannot_travel_keeps_the_check_inline(renderer, caplog):
    class Local:  # a class defined in a function cannot be pickled
        pass

    offload = CheckOffload(Local())
    with caplog.at_level(logging.WARNING, "agentrl.rollout.check_offload"):
        assert not offload.start() and not offload.running
    assert "cannot be pickled" in caplog.text


def test_settings():
    assert [check_offload_setting(v) for v in ("auto", True, False, "true", "False")] == [
        "auto", True, False, True, False]  # fmt: skip
    for bad in ("sometimes", 1, None):
        with pytest.raises(ValueError, match="tokenization_sanity_check_offload is .*auto"):
            check_offload_setting(bad)
    assert not should_offload("auto", AUTO_MIN_REQUESTS - 1)
    assert should_offload("auto", AUTO_MIN_REQUESTS) and should_offload("auto", 1, running=True)
    assert should_offload(True, 1) and not should_offload(False, 10**6)


def test_the_engine_output_is_the_same_with_and_without_the_process(tiny_tokenizer):
    compact = call_text("echo", "x y", compact=True)  # checked as the model's text
    scripts = {
        0: [call_text("echo", "hi") + "<|im_end|>", "The answer is 42<|im_end|>"],
        1: ["Let me see.\n" + compact + "<|im_end|>", "ok  <|im_end|>"],
        2: [call_text("reverse", "abc") + "<|im_end|>", call_text("wrap", "z") + "<|im_end|>",
            "done<|im_end|>"],
    }  # fmt: skip
    outputs = {}
    for setting in ("false", "true"):
        engine = AsyncRolloutEngine(
            rollout_config("n=2", f"multi_turn.tokenization_sanity_check_offload={setting}"),
            tiny_tokenizer, ConversationScriptBackend(tiny_tokenizer, scripts),
            make_tools())  # fmt: skip
        requests: list[AsyncRolloutRequest] = []
        if setting == "true":  # started and ready before the batch: the worker checks it
            assert engine.check_offload.start() and engine.check_offload.wait_ready(120)
        try:
            out = run_batch(engine, prompts_batch(3), requests)
            assert engine.check_offload.running == (setting == "true")
            assert (engine.check_offload.answered > 0) == (setting == "true")
        finally:
            engine.close()
        assert not engine.check_offload.running
        requests.sort(key=lambda r: (r.batch_data_id, r.rollout_offset))
        outputs[setting] = (
            {k: v.tolist() for k, v in out.batch.items()},
            [(r.state, r.metrics.tokenization, r.messages, r.unverified, r.verbatim)
             for r in requests],
        )
    assert outputs["true"] == outputs["false"]
    states = outputs["true"][1]
    assert {s[1] for s in states} == {"match"} and all(not s[3] for s in states)
    assert states[2][2][1]["content"] == "Let me see."  # its call stays in tool_calls
    assert states[2][2][1]["tool_calls"][0]["function"]["arguments"] == {"text": "x y"}
    assert states[2][4] == {1: "Let me see.\n" + compact}
