"""InProcessWorkerGroup: the world-size-1 group with RayWorkerGroup's interface."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from agentrl.distributed import InProcessWorkerGroup, WorkerError, WorkerSpec
from agentrl.distributed.dispatch import Dispatch, register
from agentrl.distributed.testing import CounterWorker, EchoWorker
from agentrl.distributed.worker import Worker
from agentrl.protocol import DataProto


def _batch(n: int) -> DataProto:
    return DataProto.from_dict(
        tensors={"x": torch.arange(n, dtype=torch.float32)},
        non_tensors={"tag": list("abcdefgh"[:n])},
    )


def test_single_role_methods_are_attributes_of_the_group():
    with InProcessWorkerGroup(WorkerSpec(EchoWorker, scale=3.0)) as group:
        assert group.world_size == 1
        info = group.info()
        assert [(i["rank"], i["world_size"], i["backend"]) for i in info] == [(0, 1, "gloo")]
        out = group.scale_batch(_batch(3))
        assert out.batch["y"].tolist() == [0.0, 3.0, 6.0]
        assert out.non_tensor_batch["tag"].tolist() == ["a", "b", "c"]
        assert group.all_reduce_sum(2.5) == 2.5
        assert group.add_rank([10]) == [10]
        assert group.worker().scale == 3.0
        assert group.scale_batch.__doc__ == EchoWorker.scale_batch.__doc__
    assert not dist.is_initialized()


def test_colocated_roles_share_the_process():
    specs = {"echo": WorkerSpec(EchoWorker), "counter": WorkerSpec(CounterWorker, start=1)}
    with InProcessWorkerGroup(specs) as group:
        roles = group.spawn()
        assert sorted(roles) == ["counter", "echo"]
        assert roles["counter"].increment(2) == [3]
        assert group.role("counter").increment() == [4]
        assert group.role("echo").info()[0]["pid"] == group.role("counter").pid()[0]
        assert not hasattr(group, "increment")  # several roles: reach them through role()
        with pytest.raises(
            KeyError, match="no role 'critic' in this worker group; roles: \\['counter', 'echo'\\]"
        ):
            group.role("critic")


def test_a_worker_exception_raises_worker_error_and_the_group_goes_on():
    with InProcessWorkerGroup(WorkerSpec(EchoWorker)) as group:
        with pytest.raises(WorkerError) as caught:
            group.fail_on(0)
        assert caught.value.ranks == [0] and not caught.value.stopped
        assert "EchoWorker.fail_on failed on rank 0 of 1" in str(caught.value)
        assert "ValueError: boom on rank 0" in str(caught.value)
        assert group.all_reduce_sum(1.0) == 1.0


def test_a_failing_constructor_fails_the_group():
    with pytest.raises(WorkerError, match="worker group setup failed on rank 0 of 1"):
        InProcessWorkerGroup(WorkerSpec(CounterWorker, wrong=1))
    assert not dist.is_initialized()


def test_two_in_process_groups_share_one_process_group():
    first = InProcessWorkerGroup(WorkerSpec(EchoWorker))
    second = InProcessWorkerGroup(WorkerSpec(CounterWorker))
    first.shutdown()
    assert dist.is_initialized()  # still used by the second group
    assert second.increment() == [1]
    second.shutdown()
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="was shut down"):
        second.increment()


class _Clashing(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def shutdown(self) -> None:
        """Would hide the group's own shutdown."""


def test_a_method_name_that_clashes_with_the_group_is_refused():
    with pytest.raises(ValueError, match="_Clashing.shutdown clashes with an attribute"):
        InProcessWorkerGroup(WorkerSpec(_Clashing))
