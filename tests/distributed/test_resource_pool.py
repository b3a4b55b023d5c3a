"""ResourcePool arithmetic and validation (placement groups are exercised in test_ray_group)."""

from __future__ import annotations

import pytest

from agentrl.distributed import ResourcePool


def test_world_size_and_actor_share_of_a_bundle():
    pool = ResourcePool([8, 8], use_gpu=True, cpus_per_process=4, max_colocate_count=2)
    assert pool.world_size == 16
    assert pool.actor_resources() == {"num_cpus": 2.0, "num_gpus": 0.5}
    assert ResourcePool([2]).actor_resources() == {"num_cpus": 1.0, "num_gpus": 0.0}


@pytest.mark.parametrize("nodes", [[], [2, 0]])
def test_every_node_needs_a_process(nodes):
    with pytest.raises(ValueError, match="process_on_nodes must list >= 1 process per node"):
        ResourcePool(nodes)


def test_colocate_count_must_be_positive():
    with pytest.raises(ValueError, match="max_colocate_count must be >= 1, got 0"):
        ResourcePool([1], max_colocate_count=0)


def test_remove_without_placement_groups_is_a_no_op():
    ResourcePool([1]).remove()
