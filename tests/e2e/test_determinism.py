"""The same trainer.seed gives the same run: trajectories, rewards, metrics and weights of
two multi-turn GRPO steps of the quickstart's recipe (at 8 prompts x 4 samples) repeat
exactly although tool calls return at random times, the global random streams start
elsewhere and mini-batches are shuffled; another seed differs."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from agentrl.models.tiny import make_tiny_model
from agentrl.quickstart.pipeline import QuickstartSettings, rl_config, rl_model_dir
from agentrl.tasks.quickstart import CALCULATOR, TaskData, recipe_file
from agentrl.tools import load_tool_schemas
from agentrl.trainer import run_train
from agentrl.trainer.sft import run_sft
from agentrl.utils.threads import THREADS_ENV

# seconds and a process's peak memory differ by nature
TIMING = ("timing", "time", "throughput", "latency", "_s/", "wall", "memory", "rss")


@pytest.fixture(scope="module", autouse=True)
def fixed_cpu_threads():
    """A run repeats bit for bit on a fixed number of CPU threads (docs/rollout.md): under
    `auto` the count follows the free cores, so beside another test process (pytest-xdist)
    the two runs could sum floats over other thread splits."""
    previous = os.environ.get(THREADS_ENV)
    os.environ[THREADS_ENV] = "1"
    yield
    if previous is None:
        os.environ.pop(THREADS_ENV, None)
    else:
        os.environ[THREADS_ENV] = previous


@pytest.fixture(scope="module")
def calling_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TaskData]:
    """The quickstart's nano model after 100 SFT steps of 16 on its teacher: it writes
    calculator calls (with wrong numbers, mostly), so rollouts have tool turns (measured: 21
    calls in seed 3's 64 trajectories); and the task's data."""
    out = tmp_path_factory.mktemp("calling_model")
    settings = QuickstartSettings(sft_examples=2048, n_train=64, n_test=8)
    data = CALCULATOR.prepare(out, settings)
    init = make_tiny_model(out / "init", size="nano", seed=0, chat_template="compact_tools")
    run_sft(init, data.sft, out / "sft", steps=100, lr=3e-3, batch_size=16, eval_loss=False)
    return out / "sft", data


def _jitter_tools(out: Path) -> Path:
    path = out / "jitter_tool.yaml"
    path.write_text(yaml.safe_dump({"tools": [{
        "class_name": f"{Path(__file__).parent.parent / 'fixtures' / 'jitter_tool.py'}:JitterCalculatorTool",
        "config": {"type": "native"},
        "tool_schema": load_tool_schemas(recipe_file("quickstart", "calculator_tool.yaml"))[0],
    }]}))  # fmt: skip
    return path


def _run(model: tuple[Path, TaskData], out: Path, seed: int, noise: int) -> dict:
    random.seed(noise)  # the streams the run must reseed from trainer.seed
    np.random.seed(noise)
    torch.manual_seed(noise)
    out.mkdir()
    settings = QuickstartSettings(seed=seed, steps=2, overrides=(
        f"data.seed={seed + 100}",  # the data order has its own seed here
        "actor_rollout_ref.rollout.engine_kwargs={}",  # the sampler follows trainer.seed
        "data.train_batch_size=8", "actor_rollout_ref.rollout.n=4",  # 32 trajectories a step
        "actor_rollout_ref.rollout.max_num_seqs=12",  # several micro-batches per wave
        "actor_rollout_ref.actor.shuffle=true",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",  # 4 mini-batches, shuffled
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]",
    ))  # fmt: skip
    cfg = rl_config(model[0], model[1], _jitter_tools(out), out / "rl", settings)
    history = run_train(cfg)
    rollouts = [
        [json.loads(line) for line in (out / "rl" / "rollouts" / f"{step}.jsonl").open()]
        for step in (1, 2)
    ]
    weights = load_file(next(rl_model_dir(cfg).glob("*.safetensors")))
    metrics = [
        {k: v for k, v in m.items() if not (k.endswith("_s") or any(t in k for t in TIMING))}
        for m in history
    ]
    return {"rollouts": rollouts, "metrics": metrics, "weights": weights}


@pytest.mark.slow
def test_the_same_seed_repeats_a_run_exactly(calling_model, tmp_path):
    first = _run(calling_model, tmp_path / "a", seed=3, noise=1)
    second = _run(calling_model, tmp_path / "b", seed=3, noise=2)
    calls = [r["tool_calls"] for step in first["rollouts"] for r in step]
    assert sum((c or {}).get("calculator", 0) for c in calls) > 0  # tool turns were jittered
    for step_a, step_b in zip(first["rollouts"], second["rollouts"], strict=True):
        for a, b in zip(step_a, step_b, strict=True):
            for key in ("uid", "prompt_ids", "response_ids", "loss_mask", "score", "messages"):
                assert a[key] == b[key], key
    assert first["metrics"] == second["metrics"]
    assert first["weights"].keys() == second["weights"].keys()
    for name, tensor in first["weights"].items():
        assert torch.equal(tensor, second["weights"][name]), name

    other = _run(calling_model, tmp_path / "c", seed=4, noise=1)
    assert [r["response_ids"] for r in other["rollouts"][0]] != [
        r["response_ids"] for r in first["rollouts"][0]
    ]
