"""verifiers environments' tools as BaseTools, and their loader: the environment's own
call_tool answers; a tool that raises is an error text; loading keeps the process's signal
handlers and names a missing package or environment."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("verifiers")

from agentrl.tools.execution import execute_tool_call  # noqa: E402
from agentrl.tools.schemas import OpenAIFunctionToolSchema  # noqa: E402
from agentrl.tools.verifiers import VerifiersTool, load_environment, message_text  # noqa: E402

FIXTURES = Path(__file__).parents[1] / "fixtures"  # vf_adder.py


@pytest.fixture(autouse=True)
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def _tool(name="add"):
    (schema,) = [t for t in load_environment("vf-adder").oai_tools
                 if t["function"]["name"] == "add"]
    schema = {**schema, "function": {**schema["function"], "name": name}}
    return VerifiersTool({"env": "vf-adder"}, OpenAIFunctionToolSchema.model_validate(schema))


def test_the_environments_tool_answers_and_its_error_is_the_models_to_read():
    tool = _tool()

    async def calls():
        instance, _ = await tool.create()
        ok = await execute_tool_call(tool, instance, {"a": 12, "b": 30}, timeout=5)
        bad = await execute_tool_call(tool, instance, {"a": -1, "b": 3}, timeout=5)
        await tool.release(instance)
        return ok, bad

    (ok, ok_reward, _), (bad, _, bad_metrics) = asyncio.run(calls())
    assert (ok.text, ok_reward) == ("42", 0.0)
    assert "non-negative numbers only" in bad.text and bad_metrics["tool_error"] == "exception"


def test_a_tool_the_environment_lacks_and_a_missing_env_are_named():
    with pytest.raises(ValueError, match=r"verifiers:vf-adder has no tool 'sub' \(its tools: add\)"):
        _tool("sub")
    with pytest.raises(ValueError, match="verifiers:vf-no-such-env: Could not import"):
        load_environment("vf-no-such-env")


def test_loading_keeps_the_process_signal_handlers():
    load_environment.cache_clear()
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    env = load_environment("vf-adder")
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert load_environment("vf-adder") is env  # once per process


def test_loading_off_the_main_thread_is_refused_with_the_reason():
    load_environment.cache_clear()
    errors = []
    thread = threading.Thread(target=lambda: errors.append(_load_error("vf-adder")))
    thread.start()
    thread.join()
    assert "loaded on the main thread only" in errors[0]


def _load_error(env_id):
    try:
        load_environment(env_id)
    except RuntimeError as err:
        return str(err)
    return ""


def test_a_missing_package_names_the_extra(monkeypatch):
    load_environment.cache_clear()
    monkeypatch.setitem(sys.modules, "verifiers", None)
    with pytest.raises(ImportError, match=r"verifiers:vf-adder needs the verifiers package: "
                                          r"pip install 'agentrl\[envs\]'"):
        load_environment("vf-adder")


def test_message_text_takes_text_and_text_parts_only():
    assert message_text("hi", "x") == "hi"
    assert message_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "x") == "ab"
    with pytest.raises(ValueError, match="the result is dict, not text"):
        message_text({"board": 1}, "the result")
