"""Fixtures of the trainer tests: an arithmetic dataset, the calculator tool config, and a
factory of small training configs over the tiny model (like `agentrl smoke`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import agentrl.smoke
from agentrl.config import load_config
from agentrl.tasks.arithmetic import write_arithmetic_dataset
from tools.calculator import DEFAULT_SCHEMA as CALCULATOR_SCHEMA


@pytest.fixture(scope="session")
def trainer_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("trainer_data")
    train, test = write_arithmetic_dataset(out / "data", n_train=32, n_test=4, seed=0)
    tool_config = out / "calculator_tool.yaml"
    tool_config.write_text(yaml.safe_dump({"tools": [{
        "class_name": "tools.calculator.CalculatorTool",
        "config": {"type": "native"},
        "tool_schema": CALCULATOR_SCHEMA,
    }]}))  # fmt: skip
    return {"train": train, "test": test, "tools": tool_config}


@pytest.fixture
def make_config(tiny_model_dir, trainer_data, tmp_path):
    """A GRPO config with 2 prompts x 2 samples per step, multi-turn with the calculator,
    checkpoints under tmp_path/ckpt; extra overrides win."""

    def make(*overrides: str):
        return load_config(overrides=[
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={trainer_data['train']}",
            "data.train_batch_size=2", "data.max_prompt_length=768",
            "data.max_response_length=24", "data.seed=0", "trainer.seed=0",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={trainer_data['tools']}",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.optim.lr=1e-4",
            "algorithm.adv_estimator=grpo",
            f"custom_reward_function.path={Path(agentrl.smoke.__file__)}",
            "custom_reward_function.name=smoke_compute_score",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            "trainer.logger=[console,file]",
            "trainer.val_before_train=false",
            *overrides,
        ])  # fmt: skip

    return make
