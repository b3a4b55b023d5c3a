"""agentrl/trainer/worker_setup.py: whether the Ray ranks' bundles hold a GPU.

The driver's own GPU used to decide it, so a driver on a node without one (a login node, a
CPU head pod) reserved CPU bundles for a GPU cluster. Here Ray is never started: the
cluster's resources, the driver's CUDA and the resource pool are fakes, and the group's
construction stops the start once the pool has been asked for.
"""

from __future__ import annotations

import pytest
import ray
import torch

from agentrl.config import load_config
from agentrl.trainer import worker_setup


class _Stop(Exception):
    """Raised where the worker group would start."""


class _Pool:
    def __init__(self, process_on_nodes: list[int], use_gpu: bool) -> None:
        self.process_on_nodes = process_on_nodes
        self.use_gpu = use_gpu
        _Pool.made.append(self)

    def remove(self) -> None:
        pass


def _group(*args, **kwargs):
    raise _Stop


@pytest.mark.parametrize(
    ("device", "driver_gpu", "cluster_gpus", "expected"),
    [
        ("cuda", False, 0.0, True),  # said so: the driver's GPU does not matter
        ("auto", False, 16.0, True),  # a driver without a GPU, a cluster with them
        ("auto", True, 0.0, True),
        ("auto", False, 0.0, False),  # CPUs only
        ("cpu", True, 16.0, False),
    ],
)
def test_the_bundles_hold_gpus_as_the_device_and_the_cluster_say(
    monkeypatch, device, driver_gpu, cluster_gpus, expected
):
    _Pool.made = []
    monkeypatch.setattr(worker_setup, "init_ray", lambda config: None)
    monkeypatch.setattr(worker_setup, "ResourcePool", _Pool)
    monkeypatch.setattr(worker_setup, "RayWorkerGroup", _group)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: driver_gpu)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 64.0, "GPU": cluster_gpus})
    config = load_config(
        None,
        [
            "actor_rollout_ref.model.path=/placeholder",
            "data.train_files=/placeholder.parquet",
            f"trainer.device={device}",
            "trainer.nnodes=2",
            "trainer.n_gpus_per_node=8",
            "ray_init.address=10.0.0.1:6379",
        ],
    )
    with pytest.raises(_Stop):
        worker_setup.start_workers(config, config)
    (pool,) = _Pool.made
    assert pool.process_on_nodes == [8, 8]
    assert pool.use_gpu is expected


def test_default_canary_prompts_are_the_first_validation_prompts_as_the_rollout_renders_them(
        caplog):  # fmt: skip
    from types import SimpleNamespace

    def loader(rows):
        return SimpleNamespace(dataset=rows)

    val = [{"raw_prompt_ids": [1, 2, i]} for i in range(6)]
    train = [{"raw_prompt_ids": [7, i]} for i in range(6)]
    config = load_config(overrides=[*_placeholders(), "actor_rollout_ref.rollout.canary_count=3"])
    both = SimpleNamespace(val=loader(val), train=loader(train))
    assert worker_setup.default_canary_prompts(config, both) == [[1, 2, 0], [1, 2, 1], [1, 2, 2]]
    no_val = SimpleNamespace(val=None, train=loader(train))
    assert worker_setup.default_canary_prompts(config, no_val) == [[7, 0], [7, 1], [7, 2]]
    worker = worker_setup.worker_config(config, 10, [[7, 0]])
    assert list(worker.actor_rollout_ref.rollout.canary_prompts) == [[7, 0]]
    for override in ("canary=off", "canary_prompts=[hello]"):
        given = load_config(overrides=[*_placeholders(), f"actor_rollout_ref.rollout.{override}"])
        assert worker_setup.default_canary_prompts(given, both) is None
    bare = SimpleNamespace(val=loader([{"prompt": "x"}]), train=None)
    assert worker_setup.default_canary_prompts(config, bare) == []
    assert "no canary prompts" in caplog.text


def _placeholders() -> list[str]:
    return ["actor_rollout_ref.model.path=/placeholder", "data.train_files=/placeholder.parquet"]
