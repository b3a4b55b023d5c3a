"""Worker specs, failures as data, and the host that runs a rank's roles."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from agentrl.distributed.testing import CounterWorker, EchoWorker
from agentrl.distributed.worker import RankFailure, WorkerError, WorkerHost, WorkerSpec
from agentrl.plugins import PluginLoadError


def test_spec_builds_the_worker_with_its_arguments():
    worker = WorkerSpec(CounterWorker, start=4).build()
    assert isinstance(worker, CounterWorker) and worker.count == 4


def test_spec_loads_a_dotted_path_and_checks_the_base_class():
    assert WorkerSpec("agentrl.distributed.testing.EchoWorker").cls is EchoWorker
    with pytest.raises(
        PluginLoadError, match="not a subclass of agentrl.distributed.worker.Worker"
    ):
        WorkerSpec("agentrl.protocol.DataProto")
    with pytest.raises(TypeError, match="is not a subclass of agentrl.distributed.Worker"):
        WorkerSpec(dict)


def test_rank_failure_keeps_the_traceback_text():
    try:
        raise KeyError("missing key")
    except KeyError as exc:
        failure = RankFailure.from_exception(3, exc)
    assert (failure.rank, failure.exc_type) == (3, "KeyError")
    assert 'raise KeyError("missing key")' in failure.traceback


def test_worker_error_names_the_method_ranks_and_tracebacks():
    failures = [RankFailure(1, "ValueError", "bad batch", "Traceback ...\nValueError: bad batch")]
    error = WorkerError("Actor.update_actor", failures, world_size=4, stopped=True)
    text = str(error)
    assert text.startswith(
        "Actor.update_actor failed on rank 1 of 4 (the ranks still running were stopped"
    )
    assert "--- rank 1: ValueError: bad batch" in text and "Traceback ..." in text
    assert error.ranks == [1] and error.stopped
    assert isinstance(error, RuntimeError)


def test_worker_error_names_a_lost_rank_and_its_node_first():
    lost = "node ab12 (node_b, 10.0.0.2) is lost: Ray marks it dead"
    failures = [
        RankFailure(0, "DistBackendError", "Connection closed by peer"),
        RankFailure(1, "ActorDiedError", "the worker process failed: ...", lost=lost),
    ]
    error = WorkerError("Actor.generate_sequences", failures, world_size=2, stopped=True)
    first_line = str(error).splitlines()[0]
    assert first_line.startswith(
        f"Actor.generate_sequences failed on rank 0, 1 of 2; rank 1: {lost}"
    )
    assert error.lost == {1: lost}


def test_host_outside_ray_has_no_node():
    assert WorkerHost({}).node_id() is None


def test_host_runs_colocated_roles_and_returns_failures_as_values():
    host = WorkerHost(
        {"echo": WorkerSpec(EchoWorker, scale=3.0), "counter": WorkerSpec(CounterWorker)}
    )
    assert host.setup(None, None, timeout_s=30) is None
    try:
        assert dist.is_initialized() and dist.get_world_size() == 1
        assert host.execute("counter", "increment", (5,), {}) == 5
        assert host.execute("echo", "add_rank", (7,), {}) == 7
        failure = host.execute("echo", "fail_on", (0,), {})
        assert isinstance(failure, RankFailure) and failure.message == "boom on rank 0"
        assert 'raise ValueError(f"boom on rank {rank}")' in failure.traceback
    finally:
        host.shutdown()
    assert not dist.is_initialized()


def test_host_reports_a_failing_constructor():
    host = WorkerHost({"counter": WorkerSpec(CounterWorker, no_such_argument=1)})
    failure = host.setup(None, None, timeout_s=30)
    host.shutdown()
    assert isinstance(failure, RankFailure) and failure.exc_type == "TypeError"
    assert "no_such_argument" in failure.message
