"""One place builds a rollout from the config: the engine (the default or a user's by
path), its tools and interactions, and the engine factories another process builds from."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from agentrl.config import ConfigError, load_config
from agentrl.rollout.assembly import (
    build_engine,
    configured_interactions,
    configured_tools,
    engine_factories,
)
from agentrl.rollout.engine import AsyncRolloutEngine
from agentrl.testing.rollout import (
    ConversationScriptBackend,
    prompts_batch,
    rollout_config,
    run_batch,
)

FIXTURES = Path(__file__).parent.parent / "fixtures"
ENGINE = f"{FIXTURES / 'counting_engine.py'}:CountingEngine"


@pytest.fixture
def tool_config(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"tools": [{
        "class_name": "tools.calculator.CalculatorTool",
        "config": {"type": "native"},
        "tool_schema": {"type": "function", "function": {
            "name": "calculator", "description": "evaluate",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                           "required": ["expression"]}}},
    }]}))  # fmt: skip
    return path


def test_no_paths_no_tools_no_interactions():
    multi_turn = rollout_config().multi_turn
    assert configured_tools(multi_turn) == {} and configured_interactions(multi_turn) == {}


def test_the_default_engine_gets_the_configured_tools(tiny_tokenizer, tool_config):
    rollout = rollout_config(f"multi_turn.tool_config_path={tool_config}")
    engine = build_engine(rollout, tiny_tokenizer, ConversationScriptBackend(tiny_tokenizer, {}))
    assert type(engine) is AsyncRolloutEngine
    assert list(engine.tools) == ["calculator"]


def test_a_users_engine_by_path_runs_the_rollout(tiny_tokenizer):
    rollout = rollout_config(f"engine_class={ENGINE}")
    backend = ConversationScriptBackend(tiny_tokenizer, {0: ["4<|im_end|>"], 1: ["5<|im_end|>"]})
    engine = build_engine(rollout, tiny_tokenizer, backend)
    assert type(engine).__name__ == "CountingEngine"
    before = type(engine).requests_run
    out = run_batch(engine, prompts_batch(2))
    assert len(out) == 2 * int(rollout.n)
    assert type(engine).requests_run - before == len(out)


def test_an_engine_class_that_is_not_an_engine_is_named(tiny_tokenizer):
    rollout = rollout_config(f"engine_class={FIXTURES / 'counting_engine.py'}:NotAnEngine")
    with pytest.raises(ValueError, match="engine_class: .*not a subclass of .*AsyncRolloutEngine"):
        build_engine(rollout, tiny_tokenizer, ConversationScriptBackend(tiny_tokenizer, {}))


def test_the_validator_refuses_engine_class_only_with_agent_mode():
    with pytest.raises(ConfigError, match="agent mode .agent_function. runs no engine"):
        load_config(overrides=[f"actor_rollout_ref.rollout.engine_class={ENGINE}",
                               "actor_rollout_ref.rollout.agent_function=a.py:run"])
    for other in (["trainer.mode=async"], ["actor_rollout_ref.rollout.engine_workers=2",
                                           "actor_rollout_ref.rollout.name=sglang"]):
        cfg = load_config(overrides=[f"actor_rollout_ref.rollout.engine_class={ENGINE}", *other])
        assert cfg.actor_rollout_ref.rollout.engine_class == ENGINE


def test_an_engine_workers_engine_is_the_users_too(tiny_model_dir, tiny_tokenizer):
    """EngineWorker (an engine worker's or the off-policy producer's process) builds its
    engine here too, so `engine_class` reaches every mode."""
    from agentrl.rollout.sharded import EngineWorker
    from agentrl.testing.rollout import scripted_backend_factory

    worker = EngineWorker(
        OmegaConf.to_container(rollout_config(f"engine_class={ENGINE}"), resolve=True),
        {"path": str(tiny_model_dir)},
        scripted_backend_factory({0: ["4<|im_end|>"], 1: ["5<|im_end|>"]}),
    )
    try:
        assert type(worker.engine).__name__ == "CountingEngine"
        before = type(worker.engine).requests_run
        requests = worker.rollout(prompts_batch(2), first_row=10)
        assert type(worker.engine).requests_run - before == len(requests) > 0
        assert {r.batch_data_id for r in requests} == {10, 11}
    finally:
        worker.close()


def test_engine_factories_pickle_and_build_the_tools(tool_config):
    rollout = OmegaConf.to_container(
        rollout_config(f"multi_turn.tool_config_path={tool_config}"), resolve=True
    )
    _, make_tools, make_interactions = pickle.loads(pickle.dumps(engine_factories(rollout, None)))
    assert list(make_tools()) == ["calculator"] and make_interactions() == {}
