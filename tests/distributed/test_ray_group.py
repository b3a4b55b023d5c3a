"""RayWorkerGroup on a local 2-CPU Ray: environment, dispatch, colocation and failures."""

from __future__ import annotations

import time

import pytest
import torch

from agentrl.distributed import RayWorkerGroup, ResourcePool, WorkerError, WorkerSpec
from agentrl.distributed.testing import CounterWorker, EchoWorker
from agentrl.protocol import DataProto

# one worker runs the module under xdist: one Ray instance (ray_cluster) instead of two
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray_group")]
ray = pytest.importorskip("ray")
# half a CPU per rank: the shared group's pool and a test's own fit the 2-CPU Ray together
CPUS_PER_RANK = 0.5


@pytest.fixture
def pool(ray_cluster):
    pool = ResourcePool([2], cpus_per_process=CPUS_PER_RANK)
    yield pool
    pool.remove()


@pytest.fixture(scope="module")
def echo_group(ray_cluster):
    """One EchoWorker group for the tests that leave it usable (one start of its two
    actor processes instead of one per test)."""
    pool = ResourcePool([2], cpus_per_process=CPUS_PER_RANK, name_prefix="agentrl_shared")
    group = RayWorkerGroup(pool, WorkerSpec(EchoWorker, scale=10.0), dist_timeout_s=60,
                           error_grace_s=30)  # fmt: skip
    yield group
    group.shutdown()
    pool.remove()


def _batch(n: int) -> DataProto:
    return DataProto.from_dict(
        tensors={"x": torch.arange(n, dtype=torch.float32)},
        non_tensors={"tag": [str(i) for i in range(n)]},
    )


def test_ranks_get_the_torch_distributed_environment_and_dispatch_by_mode(echo_group):
    group = echo_group
    info = group.info()
    assert [i["rank"] for i in info] == [0, 1]
    assert {i["world_size"] for i in info} == {2} and {i["backend"] for i in info} == {"gloo"}
    env0, env1 = info[0]["env"], info[1]["env"]
    assert (env0["RANK"], env1["RANK"], env0["WORLD_SIZE"]) == ("0", "1", "2")
    assert (env0["LOCAL_RANK"], env1["LOCAL_RANK"], env1["LOCAL_WORLD_SIZE"]) == ("0", "1", "2")
    assert (
        env0["MASTER_ADDR"] == env1["MASTER_ADDR"]
        and env0["MASTER_PORT"] == env1["MASTER_PORT"]
    )
    assert info[0]["pid"] != info[1]["pid"]
    assert group.node_ids == [ray.get_runtime_context().get_node_id()] * 2

    out = group.scale_batch(_batch(4))
    assert out.batch["y"].tolist() == [0.0, 10.0, 20.0, 30.0]
    assert out.batch["rank"].tolist() == [0, 0, 1, 1]
    assert out.non_tensor_batch["tag"].tolist() == ["0", "1", "2", "3"]
    assert out.meta_info == {"rank": 0}
    padded = group.scale_batch_padded(_batch(3))
    assert padded.batch["y"].tolist() == [0.0, 10.0, 20.0]
    assert padded.batch["rank"].tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="3 samples cannot be split evenly across 2"):
        group.scale_batch(_batch(3))
    assert group.all_reduce_sum(1.5) == 3.0  # a real collective across the two actors
    assert group.add_rank([100, 200]) == [100, 201]


def test_colocated_roles_run_in_one_process_per_rank(pool):
    group = RayWorkerGroup(
        pool, {"echo": WorkerSpec(EchoWorker), "counter": WorkerSpec(CounterWorker, start=10)}
    )
    try:
        echo, counter = group.role("echo"), group.role("counter")
        assert [i["pid"] for i in echo.info()] == counter.pid()
        assert counter.increment(5) == [15, 15]
        assert echo.all_reduce_sum(2.0) == 4.0
    finally:
        group.shutdown()


def test_a_failed_rank_surfaces_its_traceback_and_peers_in_a_collective_are_stopped(pool):
    group = RayWorkerGroup(pool, WorkerSpec(EchoWorker), dist_timeout_s=120, error_grace_s=2)
    started = time.monotonic()
    with pytest.raises(WorkerError) as caught:
        group.fail_on(1)  # rank 0 waits for rank 1 in an all-reduce that never comes
    elapsed = time.monotonic() - started
    error = caught.value
    assert error.ranks == [1] and error.stopped
    text = str(error)
    assert text.startswith("EchoWorker.fail_on failed on rank 1 of 2 (the ranks still running")
    assert "ValueError: boom on rank 1" in text
    assert 'raise ValueError(f"boom on rank {rank}")' in text  # the worker's own traceback
    assert elapsed < 60  # the grace period, not the 120 s collective timeout
    with pytest.raises(RuntimeError, match="unusable since EchoWorker.fail_on failed on rank 1"):
        group.info()
    group.shutdown()


def test_failures_on_every_rank_keep_the_group_usable(echo_group):
    with pytest.raises(WorkerError) as caught:
        echo_group.scale_batch(DataProto.from_dict(tensors={"z": torch.zeros(2)}))
    assert caught.value.ranks == [0, 1] and not caught.value.stopped
    assert "KeyError" in str(caught.value)
    assert echo_group.usable and echo_group.all_reduce_sum(1.0) == 2.0


def test_a_crashed_worker_process_is_reported_with_its_node_and_stops_the_group(pool):
    group = RayWorkerGroup(pool, WorkerSpec(EchoWorker), error_grace_s=60)
    started = time.monotonic()
    with pytest.raises(WorkerError) as caught:
        group.crash(0)
    assert time.monotonic() - started < 30  # a lost rank is not given the grace period
    error = caught.value
    assert error.ranks == [0] and error.stopped and not group.usable
    node = group.node_ids[0]
    assert error.lost == {0: f"node {node} ({_node_ip(node)}) is up (its raylet answers); "
                             "the worker process died"}  # fmt: skip
    assert str(error).startswith(f"EchoWorker.crash failed on rank 0 of 2; rank 0: node {node}")
    assert "the worker process failed" in str(error)
    with pytest.raises(RuntimeError, match="unusable since EchoWorker.crash lost rank 0"):
        group.info()
    group.shutdown()


def _node_ip(node_id: str) -> str:
    return next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id)


def test_a_failing_constructor_fails_the_group_with_its_traceback(pool):
    with pytest.raises(WorkerError, match="worker group setup failed on rank 0, 1 of 2") as caught:
        RayWorkerGroup(pool, WorkerSpec(CounterWorker, wrong=1))
    assert "unexpected keyword argument 'wrong'" in str(caught.value)
