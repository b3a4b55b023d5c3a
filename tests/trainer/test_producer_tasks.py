"""The producer's tasks on its loop (agentrl/trainer/producer_tasks.py): groups start as the
throttle allows, a failing row stops the producer for the trainer to see, and cancel stops
every request in flight."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.testing.rollout import prompts_batch
from agentrl.trainer.producer import RolloutProducer
from agentrl.trainer.producer_tasks import cancel
from agentrl.utils.aio import LoopThread


class StubEngine:
    """A ProducerEngine whose requests wait until released (or raise for a bad row)."""

    def __init__(self, bad_rows=()):
        self.bad_rows, self.started, self.cancelled = set(bad_rows), [], []
        self.release = None

    def new_context(self, validate=False, on_request_done=None, trace=None):
        self.release = asyncio.Event()
        return "ctx"

    def build_requests(self, batch, n):
        uid = str(batch.non_tensor_batch["uid"][0])
        if uid in self.bad_rows:
            raise ValueError(f"bad row {uid}")
        return [f"{uid}/{k}" for k in range(n)]

    async def run_request(self, request, ctx):
        self.started.append(request)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(request)
            raise

    def collect(self, requests, batch, wall_s):
        return batch

    def close(self):
        pass


@pytest.fixture
def loop():
    thread = LoopThread("test-producer-tasks")
    yield thread
    thread.close()


def started_producer(engine, loop):
    """Started at version 0 with max_staleness 0, two loader batches of two prompts pushed."""
    producer = RolloutProducer(engine, loop, n=2, max_staleness=0, total_batches=3)
    producer.start(0)
    for start in (0, 2):
        producer.add_batch(prompts_batch(4)[start : start + 2].to_single_dict())
    return producer


def test_groups_start_as_the_throttle_allows_and_cancel_stops_them(loop):
    engine = StubEngine()
    producer = started_producer(engine, loop)
    loop.run(asyncio.sleep(0.05))
    # max_staleness 0 at version 0: batch 1's two prompts run, batch 2's wait
    assert sorted(engine.started) == ["1-0/0", "1-0/1", "1-1/0", "1-1/1"]
    assert [g.uid for g in producer.waiting] == ["2-0", "2-1"] and producer.started
    loop.run(cancel(producer))
    assert sorted(engine.cancelled) == sorted(engine.started)
    assert producer.main_task is None and not producer.started and producer.running == {}


def test_a_row_the_engine_refuses_reaches_the_trainers_take(loop):
    producer = started_producer(StubEngine(bad_rows={"1-1"}), loop)
    with pytest.raises(RuntimeError, match="the rollout producer failed") as failed:
        producer.take(2, policy_version=0, timeout=10)
    assert str(failed.value.__cause__) == "bad row 1-1"
    producer.stop()
