"""examples/agents: the calculator agent, plain OpenAI-client code, runs through agentrl's
agent mode: the model's tool call is executed by the agent, and the answer is scored."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from agentrl.gateway.agent_rollout import AgentRollout
from agentrl.gateway.agent_settings import AgentSettings
from agentrl.testing.rollout import ConversationScriptBackend, prompts_batch, rollout_config

pytest.importorskip("openai")
AGENTS = Path(__file__).resolve().parents[2] / "examples" / "agents"
AGENT = AGENTS / "calculator_agent.py"
AGENTS_SDK = AGENTS / "calculator_agents_sdk.py"
DIALECTS = {"calculator_anthropic.py": "anthropic", "calculator_responses.py": "openai",
            "calculator_langgraph.py": "openai"}
CALL = ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n'
        "</tool_call><|im_end|>")
SCRIPTS = {0: [CALL, "<answer>42</answer><|im_end|>"], 1: ["<answer>41</answer><|im_end|>"]}


def _load(path: Path = AGENT):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_calculator_agent_is_trained_in_agent_mode(tiny_tokenizer):
    agent = _load()
    assert agent.calculate('{"expression": "2**10"}') == "1024"
    assert agent.calculate('{"expression": "import os"}').startswith("Error:")
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
    rollout = AgentRollout(AgentSettings.from_config(rollout_config()), tiny_tokenizer, backend, agent.run)
    batch = prompts_batch(2, reward_model=[{"ground_truth": "42"}, {"ground_truth": "42"}])
    out = asyncio.run(rollout.agenerate_sequences(batch))
    assert list(out.non_tensor_batch["request_state"]) == ["completed", "completed"]
    assert out.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.0]  # used the tool: right
    # the turns and calls the agent made count as the engine's would
    assert list(out.non_tensor_batch["num_turns"]) == [4, 2]
    assert out.meta_info["metrics"]["rollout/tool_call_rate"] == 0.5
    assert out.meta_info["metrics"]["rollout/tool_calls/calculator"] == 1.0
    # the calculator's answer went back to the model as a tool message
    assert any(m.get("role") == "tool" and m.get("content") == "42"
               for m in out.non_tensor_batch["messages"][0])


def test_the_agents_sdk_agent_is_trained_in_agent_mode_without_rewrites(tiny_tokenizer):
    pytest.importorskip("agents")
    agent = _load(AGENTS_SDK)
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
    rollout = AgentRollout(AgentSettings.from_config(rollout_config()), tiny_tokenizer, backend, agent.run)
    batch = prompts_batch(2, reward_model=[{"ground_truth": "42"}, {"ground_truth": "42"}])
    out = asyncio.run(rollout.agenerate_sequences(batch))
    assert list(out.non_tensor_batch["request_state"]) == ["completed", "completed"]
    assert out.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.0]
    assert list(out.non_tensor_batch["num_turns"]) == [4, 2]
    # the SDK replays its history exactly: one segment per episode, nothing re-tokenized
    assert out.meta_info["metrics"]["rollout/agent_rewrites"] == 0.0
    messages = out.non_tensor_batch["messages"][0]
    assert any(m.get("role") == "tool" and m.get("content") == "42" for m in messages)
    # the trained tokens of episode 0 are the backend's two outputs, exactly
    mask = out.batch["response_mask"][0].bool()
    trained = out.batch["responses"][0][mask].tolist()
    assert trained == [i for (k, _), calls in backend.outputs.items() if k == 0
                       for ids in calls for i in ids]


def _needs(name: str, client: str) -> str:
    return "langgraph" if "langgraph" in name else client


@pytest.mark.parametrize(("name", "client"), DIALECTS.items())
def test_the_messages_and_responses_agents_are_trained_in_agent_mode(tiny_tokenizer, name,
                                                                    client):
    pytest.importorskip(_needs(name, client))
    agent = _load(AGENTS / name)
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
    settings = AgentSettings.from_config(rollout_config(f"agent_client={client}"))
    rollout = AgentRollout(settings, tiny_tokenizer, backend, agent.run)
    batch = prompts_batch(2, reward_model=[{"ground_truth": "42"}, {"ground_truth": "42"}])
    out = asyncio.run(rollout.agenerate_sequences(batch))
    assert list(out.non_tensor_batch["request_state"]) == ["completed", "completed"]
    assert out.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.0]
    assert list(out.non_tensor_batch["num_turns"]) == [4, 2]
    assert out.meta_info["metrics"]["rollout/agent_rewrites"] == 0.0
    assert out.meta_info["metrics"]["rollout/tool_calls/calculator"] == 1.0
    mask = out.batch["response_mask"][0].bool()
    assert out.batch["responses"][0][mask].tolist() == [
        i for (k, _), calls in backend.outputs.items() if k == 0 for ids in calls for i in ids]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "client"), DIALECTS.items())
def test_two_grpo_steps_with_each_dialects_agent(make_config, name, client):
    """The tiny policy's replies are mostly not calls or answers: the agents must still
    finish every episode (no agent errors) and the trainer must step."""
    pytest.importorskip(_needs(name, client))
    from agentrl.trainer import PPOTrainer

    cfg = make_config(f"actor_rollout_ref.rollout.agent_function={AGENTS / name}:run",
                      f"actor_rollout_ref.rollout.agent_client={client}",
                      "actor_rollout_ref.rollout.multi_turn.enable=false",
                      "trainer.total_training_steps=2")
    trainer = PPOTrainer(cfg)
    try:
        history = trainer.fit()
    finally:
        trainer.close()
    assert [m["training/global_step"] for m in history] == [1.0, 2.0]
    for metrics in history:
        assert metrics["rollout/agent_errors"] == 0
        assert metrics["actor/grad_norm"] >= 0 and 0.0 <= metrics["critic/score/max"] <= 1.0


@pytest.mark.parametrize("name", ["calculator_agent.py", "calculator_agents_sdk.py"])
def test_the_readme_agents_train_two_steps_and_score(make_config, trainer_data, tmp_path, name):
    """The agents the README trains (bench/quickstart_seeds.py --agent-function), two steps
    of the trainer in agent mode over a scripted policy (rollout.name=scripted) that calls
    the calculator and then answers the first problem's result: that row scores 1, the
    other 0, so the agent's tool call and its scoring are on the trainer's path."""
    import json

    import pyarrow.parquet as pq

    from agentrl.trainer import PPOTrainer

    pytest.importorskip("agents" if "sdk" in name else "openai")
    rows = pq.read_table(trainer_data["train"]).to_pylist()[:2]
    truths = [r["reward_model"]["ground_truth"] for r in rows]
    assert truths[0] != truths[1]
    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps(CALL) + "\n" + json.dumps(f"<answer>{truths[0]}</answer>")
                       + "\n")
    cfg = make_config(f"actor_rollout_ref.rollout.agent_function={AGENTS / name}:run",
                      "actor_rollout_ref.rollout.multi_turn.enable=false",
                      "actor_rollout_ref.rollout.name=scripted",
                      f"+actor_rollout_ref.rollout.engine_kwargs.replies={replies}",
                      "data.shuffle=false", "data.max_response_length=128",
                      "algorithm.adv_estimator=reinforce_plus_plus",
                      "trainer.total_training_steps=2")
    trainer = PPOTrainer(cfg)
    try:
        history = trainer.fit()
    finally:
        trainer.close()
    assert [m["training/global_step"] for m in history] == [1.0, 2.0]
    first = history[0]
    assert first["rollout/agent_errors"] == 0
    assert (first["critic/score/max"], first["critic/score/mean"]) == (1.0, 0.5)
    assert first["rollout/tool_calls/calculator"] == 4.0  # 2 rows x n=2, one call each
    assert first["actor/grad_norm"] > 0
