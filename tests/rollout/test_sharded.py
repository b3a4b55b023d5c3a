"""Rollout sharded over agent workers (agentrl/rollout/sharded.py): the same batch gives the
same trajectories, order and metrics with 1 engine and with 2 Ray agent workers."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from agentrl.rollout import AsyncRolloutEngine
from agentrl.rollout.sharded import ShardedRolloutEngine, shard_rows
from agentrl.testing.rollout import (
    ConversationScriptBackend,
    call_text,
    make_tools,
    prompts_batch,
    rollout_config,
    scripted_backend_factory,
)

# 5 conversations: tool turns of several tools, then an answer
SCRIPTS = {
    k: [call_text(name, f"x{k}") + "<|im_end|>" for name in ("echo", "wrap", "reverse")[: k % 3]]
    + [f"answer {k} <answer>{k}</answer><|im_end|>"]
    for k in range(5)
}


def test_shards_are_contiguous_and_near_equal():
    assert [s.tolist() for s in shard_rows(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [s.tolist() for s in shard_rows(1, 3)] == [[0]]


@pytest.mark.slow
def test_two_engine_workers_give_the_same_trajectories_as_one(ray_cluster, tiny_model_dir,
                                                             tiny_tokenizer):
    cfg = rollout_config()
    batch = prompts_batch(5, tools_kwargs={"echo": {}, "wrap": {}, "reverse": {}})
    batch.non_tensor_batch["uid"] = np.array([f"u{k}" for k in range(5)], dtype=object)
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
    single = AsyncRolloutEngine(cfg, tiny_tokenizer, backend, make_tools())
    expected = asyncio.run(single.agenerate_sequences(batch.select(deepcopy=True)))
    sharded = ShardedRolloutEngine(2, cfg, {"path": str(tiny_model_dir)},
                                   scripted_backend_factory(SCRIPTS), make_tools)
    try:
        got = sharded.generate_sequences(batch.select(deepcopy=True))
    finally:
        sharded.close()
    assert expected.batch.keys() == got.batch.keys()
    for key in expected.batch.keys():
        assert torch.equal(expected.batch[key], got.batch[key]), key
    for key in ("uid", "messages", "reward_scores", "num_turns", "finish_reason"):
        assert list(expected.non_tensor_batch[key]) == list(got.non_tensor_batch[key]), key
    for key, value in expected.meta_info["metrics"].items():
        assert got.meta_info["metrics"][key] == pytest.approx(value), key
