"""examples/agents: the calculator agent, plain OpenAI-client code, runs through agentrl's
agent mode: the model's tool call is executed by the agent, and the answer is scored."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from agentrl.gateway.agent_rollout import AgentRollout
from agentrl.rollout.testing import ScriptedBackend, prompts_batch, rollout_config

pytest.importorskip("openai")
AGENT = Path(__file__).resolve().parents[2] / "examples" / "agents" / "calculator_agent.py"
CALL = ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n'
        "</tool_call><|im_end|>")
SCRIPTS = {0: [CALL, "<answer>42</answer><|im_end|>"], 1: ["<answer>41</answer><|im_end|>"]}


def _load():
    spec = importlib.util.spec_from_file_location("calculator_agent", AGENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_calculator_agent_is_trained_in_agent_mode(tiny_tokenizer):
    agent = _load()
    assert agent.calculate('{"expression": "2**10"}') == "1024"
    assert agent.calculate('{"expression": "import os"}').startswith("Error:")
    backend = ScriptedBackend(tiny_tokenizer, SCRIPTS)
    rollout = AgentRollout(rollout_config(), tiny_tokenizer, backend, agent.run)
    batch = prompts_batch(2, reward_model=[{"ground_truth": "42"}, {"ground_truth": "42"}])
    out = asyncio.run(rollout.agenerate_sequences(batch))
    assert list(out.non_tensor_batch["request_state"]) == ["completed", "completed"]
    assert out.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.0]  # used the tool: right
    # the calculator's answer went back to the model as a tool message
    assert any(m.get("role") == "tool" and m.get("content") == "42"
               for m in out.non_tensor_batch["messages"][0])
