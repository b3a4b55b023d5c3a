"""Shared fixtures: offline tiny models, and an environment that never reaches a hub."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 model + tokenizer directory (~0.8M parameters), built once per session."""
    from agentrl.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny_model"), size="tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path):
    """The tiny model's tokenizer, loaded the way users load theirs."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def varied_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with its matrices scaled by 6. A random tiny model repeats one token
    under greedy decoding; sharper logits make greedy outputs differ per position, so tests
    like "the rollout generates what the actor would" can fail."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("varied_model")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.mul_(6.0)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def ray_cluster():
    """A local 2-CPU Ray session for the tests of one module (skipped without Ray)."""
    pytest.importorskip("ray")
    from agentrl.distributed.testing import ray_session

    with ray_session(num_cpus=2):
        yield


def _process_group_initialized() -> bool:
    dist = sys.modules.get("torch.distributed")  # never imported: no group can exist
    return dist is not None and dist.is_available() and dist.is_initialized()


@pytest.fixture(autouse=True)
def _no_process_group_outlives_its_test(request: pytest.FixtureRequest):
    """A torch.distributed process group that a test's worker group made must be gone when
    the test ends (tests run in random order: a leaked group fails whoever runs next)."""
    before = _process_group_initialized()
    yield
    if before or not _process_group_initialized():
        return
    gc.collect()  # a worker group dropped without shutdown() leaves it when collected
    if _process_group_initialized():
        pytest.fail(f"{request.node.nodeid} left a torch.distributed process group initialised")


# the trainer tests' data and configs (tests/trainer, tests/e2e)
@pytest.fixture(scope="session")
def trainer_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """32 training and 4 test arithmetic problems, and the calculator's tool config."""
    import yaml

    from agentrl.tasks.arithmetic import write_arithmetic_dataset
    from tools.calculator import DEFAULT_SCHEMA as CALCULATOR_SCHEMA

    out = tmp_path_factory.mktemp("trainer_data")
    train, test = write_arithmetic_dataset(out / "data", n_train=32, n_test=4, seed=0)
    tool_config = out / "calculator_tool.yaml"
    tool_config.write_text(yaml.safe_dump({"tools": [{
        "class_name": "tools.calculator.CalculatorTool",
        "config": {"type": "native"},
        "tool_schema": CALCULATOR_SCHEMA,
    }]}))  # fmt: skip
    return {"train": train, "test": test, "tools": tool_config}


@pytest.fixture(scope="session")
def short_prompts(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    """Overrides for make_config: trainer_data's 32 problems under the short system prompt,
    no tool schema rendered into them (~75 prompt tokens instead of ~610). For runs whose
    reward ignores the prompt (tests/e2e/test_learning.py): a tiny model's update costs
    about its prompt tokens."""
    from agentrl.tasks.arithmetic import SHORT_SYSTEM_PROMPT, write_arithmetic_dataset

    out = tmp_path_factory.mktemp("short_prompts")
    train, _ = write_arithmetic_dataset(out, n_train=32, n_test=4, seed=0,
                                        system_prompt=SHORT_SYSTEM_PROMPT)  # fmt: skip
    return f"data.train_files={train}", "actor_rollout_ref.rollout.multi_turn.tool_config_path=null"


@pytest.fixture
def make_config(tiny_model_dir, trainer_data, tmp_path):
    """A GRPO config with 2 prompts x 2 samples per step, multi-turn with the calculator,
    checkpoints under tmp_path/ckpt; extra overrides win."""
    import agentrl.smoke
    from agentrl.config import load_config

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



@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """End-to-end tests (marked slow, vllm or harness) first, each group still in the order
    pytest-randomly gave (it shuffles before this hook runs). Under pytest-xdist a
    minutes-long test then starts early while quick tests fill the other worker, instead of
    starting last and running alone at the end."""
    items.sort(key=lambda item: not any(item.get_closest_marker(name)
                                        for name in ("slow", "vllm", "harness")))
    if getattr(config, "workerinput", None) is not None and config.getvalue("loadgroup"):
        _group_suffixes(items)


def _group_suffixes(items: list[pytest.Item]) -> None:
    """What pytest-xdist's worker does for `--dist loadgroup` (the `@group` suffix on the
    node ids of tests marked `xdist_group`, by which the controller sends a group to one
    worker), done here because xdist 3.8 writes `item._nodeid`, which pytest 9 no longer
    reads (its node ids live in `item._id`): without it every group is split across workers
    and each worker builds the group's module fixtures (servers) again."""
    from _pytest.nodes import coerce_node_id

    for item in items:
        names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                        for mark in item.iter_markers("xdist_group")})  # fmt: skip
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            item._id = coerce_node_id(item.nodeid + suffix)
