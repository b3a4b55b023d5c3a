"""The off-policy modes' rollout: a producer that keeps generating while the actor trains.

    producer = RolloutProducer(engine, loop, n=8, max_staleness=1, total_batches=100)
    producer.start(version=0)
    for _ in range(producer.batches_wanted()):
        producer.add_batch(next(loader_batches))         # the trainer pushes the data order
    groups, stats = producer.take(16, policy_version=0)   # blocks
    data = producer.collect(groups, meta_info)            # one DataProto, as the sync rollout
    ...train...; sync the weights to the servers; producer.set_version(1)
    state = producer.state_dict()                         # the checkpoint's share
    producer.stop()

The engine (``AsyncRolloutEngine`` over the inference servers, ``agentrl serve`` on CPU,
SGLang or vLLM on GPUs; in agent mode an ``AgentRollout``, agentrl/gateway/agent_rollout.py,
whose requests are episodes of the user's agent function, each through its own gateway
session, with the same methods, ``ProducerEngine``: ``new_context``, ``build_requests``,
``run_request``, ``collect``, ``close``) runs on an event loop in its own thread (``loop``, a ``LoopThread``), one
coroutine per prompt group (``rollout.n`` requests), all sharing one batch context, so
``max_concurrent_requests`` bounds the whole producer. Each of the trainer's calls runs on
that loop too (``utils.aio.on_loop``), one method per operation. The trainer runs it in a process of
its own (``ProducerHost``, a Ray actor): the agent loop's Python work (templates, tokenizer,
HTTP) then never competes with the update for the trainer's interpreter lock.

Versions, the throttle (a prompt of loader batch b starts once the servers hold version
``b - 1 - max_staleness``), the stale drop in ``take`` and partial rollouts (``one_step_off``
instead waits until the producer is idle, ``wait_idle``, before each sync): docs/off_policy.md,
"Versions and staleness"; a group's versions: prompt_group.py. A step that needs more than
one batch's worth of groups (DAPO's dynamic sampling dropped those whose rewards do not
vary) grants more with ``allow_more``: each grant lets one more batch start, as if the
versions were one further ahead, so the bound stays ``max_staleness + 1`` batches beyond
what the trainer has taken. The producer's tasks on its loop: producer_tasks.py.

Checkpoints. ``state_dict`` records the finished groups not yet trained (their requests) and
the prompts pushed but unfinished (in flight or waiting); saved with the loader's position
(the trainer pushes batches from its own thread, so the two agree), ``load_state_dict`` puts
the first back in the buffer and the second at the head of the queue, to be generated again:
a resumed run trains every prompt of the data order once.

Timeline. With a ``trace`` recorder (``trainer.trace``) the requests record their spans as
they run (agentrl/utils/trace.py); the trainer takes them after each step's weight sync
(``drain_trace``), so a step's trace shows what the producer did while the actor trained.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from agentrl.protocol import DataProto, to_object_array
from agentrl.trainer.producer_tasks import cancel, produce
from agentrl.trainer.prompt_group import PromptGroup, TakeStats
from agentrl.utils.aio import on_loop
from agentrl.utils.trace import Event, TraceRecorder

logger = logging.getLogger(__name__)


class ProducerEngine(Protocol):
    """What the producer drives: ``AsyncRolloutEngine`` (agentrl/rollout/engine.py) and agent
    mode's ``AgentRollout`` (agentrl/gateway/agent_rollout.py) alike."""

    def new_context(self, validate: bool = False, on_request_done: Any = None,
                    trace: Any = None) -> Any: ...  # fmt: skip

    def build_requests(self, batch: DataProto, n: int) -> list[Any]: ...

    async def run_request(self, request: Any, ctx: Any) -> None: ...

    def collect(self, requests: list[Any], batch: DataProto, wall_s: float) -> DataProto: ...

    def close(self) -> None: ...


class RolloutProducer:
    """See the module docstring."""

    def __init__(
        self,
        engine: ProducerEngine,
        loop: Any,
        *,
        n: int,
        max_staleness: int,
        total_batches: int,
        trace: TraceRecorder | None = None,
        on_version: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.engine, self.loop, self.n = engine, loop, n
        # awaited on the loop by set_version before the version takes effect (ProducerHost:
        # its servers' client learns what the servers hold)
        self.on_version = on_version
        self.trace = trace  # the requests' timeline, drained by the trainer (drain_trace)
        self.max_staleness, self.total_batches = max_staleness, total_batches
        self.version = 0
        self.next_batch = 1  # the index the next pushed loader batch gets
        # loader batches granted beyond one per version: a step that takes more than one
        # batch's worth of groups (DAPO's dynamic sampling) lets as many more start
        self.extra_batches = 0
        self.waiting: deque[PromptGroup] = deque()  # pulled, not started (data order)
        self.running: dict[str, tuple[PromptGroup, asyncio.Task]] = {}
        self.finished: list[PromptGroup] = []  # in the order they finished
        self.dropped_total = 0
        self._dropped_since_take = 0
        self.changed: asyncio.Event | None = None
        self.main_task: asyncio.Task | None = None
        self.context: Any = None
        self._idle_since: float | None = None
        self._idle_s = 0.0
        self.error: BaseException | None = None

    # ------------------------------------------------------------------ the trainer's calls

    @property
    def started(self) -> bool:
        return self.main_task is not None

    @on_loop
    def start(self, version: int) -> None:
        """Start producing with the servers at policy ``version``."""
        self.version = version
        self.changed = asyncio.Event()
        self.context = self.engine.new_context(validate=False, trace=self.trace)
        self.main_task = asyncio.ensure_future(produce(self))

    @on_loop
    async def set_version(self, version: int) -> None:
        """The servers now hold ``version`` (called after each weight sync)."""
        if self.on_version is not None:
            await self.on_version(version)
        self.version = version
        self.changed.set()

    @on_loop
    def batches_wanted(self) -> int:
        """How many more loader batches the throttle lets start now."""
        last = min(self.total_batches + self.extra_batches,
                   self.version + self.extra_batches + 1 + self.max_staleness)
        return max(0, last - self.next_batch + 1)

    @on_loop
    def allow_more(self, batches: int = 1) -> None:
        """Let ``batches`` more loader batches start than the versions allow: a step that
        needs more groups than one batch holds (algorithm.filter_groups dropped some)."""
        self.extra_batches += batches
        self.changed.set()

    @on_loop
    def add_batch(self, batch_dict: dict[str, Any]) -> None:
        """Queue the next loader batch (its prompts start when the throttle allows)."""
        batch, index = DataProto.from_single_dict(batch_dict), self.next_batch
        batch.non_tensor_batch["uid"] = to_object_array(
            [f"{index}-{i}" for i in range(len(batch))], "uid"
        )
        self.waiting.extend(
            PromptGroup(f"{index}-{i}", index, batch[i : i + 1]) for i in range(len(batch))
        )
        self.next_batch += 1
        self.changed.set()

    @on_loop
    async def take(
        self, count: int, policy_version: int, timeout: float | None = None
    ) -> tuple[list[PromptGroup], TakeStats] | None:
        """Block until ``count`` finished groups at most ``max_staleness`` versions older
        than ``policy_version`` are ready; return them (first finished first). With
        ``timeout``: None when they are not ready by then."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        while True:
            if self.error is not None:
                raise RuntimeError("the rollout producer failed") from self.error
            self._drop_stale(policy_version)
            if len(self.finished) >= count:
                break
            if self.main_task is None or self.main_task.done():
                raise RuntimeError(
                    f"the rollout producer has stopped with {len(self.finished)} of the "
                    f"{count} groups a step needs"
                )
            if not (self.running or self.waiting):
                raise RuntimeError(
                    f"{len(self.finished)} finished groups and nothing left to generate for "
                    f"a step of {count}: push the loader's batches first (add_batch)"
                )
            self.changed.clear()
            if deadline is None:
                await self.changed.wait()
            elif not await _wait(self.changed, deadline - time.perf_counter()):
                return None
        groups, self.finished = self.finished[:count], self.finished[count:]
        dropped, self._dropped_since_take = self._dropped_since_take, 0
        self.changed.set()  # room for the throttle to look again
        return groups, TakeStats(self._idle_seconds(), dropped, len(self.finished))

    @on_loop
    async def wait_idle(self) -> float:
        """Block until nothing is generating (one_step_off, before a weight sync); returns
        the seconds waited."""
        started = time.perf_counter()
        while self.running:
            self.changed.clear()
            await self.changed.wait()
        return time.perf_counter() - started

    def collect(self, groups: list[PromptGroup], meta_info: dict[str, Any]) -> DataProto:
        """The groups' trajectories as the sync rollout's DataProto (rows in ``groups``
        order, n per prompt), with the rollout metrics over exactly these requests."""
        batch = DataProto.concat([g.prompt for g in groups])
        batch.meta_info.update(meta_info)
        requests = []
        for row, group in enumerate(groups):
            for request in group.requests:
                request.batch_data_id = row
                requests.append(request)
        return self.engine.collect(requests, batch, max(g.seconds for g in groups))

    @on_loop
    def drain_trace(self) -> list[Event]:
        """The spans recorded since the last call (none without a ``trace`` recorder); on
        the loop's thread, where the requests record them."""
        return [] if self.trace is None else self.trace.drain()

    @on_loop
    def state_dict(self) -> dict[str, Any]:
        """The checkpoint's share (module docstring)."""
        unfinished = [g for g, _ in self.running.values()] + list(self.waiting)
        unfinished.sort(key=lambda g: (g.batch_index, int(g.uid.split("-")[1])))
        return {
            "next_batch": self.next_batch,
            "extra_batches": self.extra_batches,
            "dropped_total": self.dropped_total,
            "finished": [g.record() for g in self.finished],
            "unfinished": [g.record(with_requests=False) for g in unfinished],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``'s buffer and queue (before ``start``)."""
        self.next_batch = int(state["next_batch"])
        self.extra_batches = int(state.get("extra_batches", 0))
        self.dropped_total = int(state.get("dropped_total", 0))
        self.finished = [PromptGroup.from_record(g) for g in state["finished"]]
        self.waiting = deque(PromptGroup.from_record(g) for g in state["unfinished"])

    def stop(self) -> None:
        """Cancel the producer and every request in flight (their tools are released)."""
        if self.main_task is not None:
            self.loop.run(cancel(self), timeout=120)

    # ------------------------------------------------------------------ on the loop

    def allowed(self, batch_index: int) -> bool:
        return self.version + self.extra_batches >= batch_index - 1 - self.max_staleness

    def mark_idle(self, idle: bool) -> None:
        now = time.perf_counter()
        if idle and self._idle_since is None:
            self._idle_since = now
        elif not idle and self._idle_since is not None:
            self._idle_s += now - self._idle_since
            self._idle_since = None

    def _idle_seconds(self) -> float:
        """Idle time since the last call (the part of a current idle spell included)."""
        now = time.perf_counter()
        idle = self._idle_s + (now - self._idle_since if self._idle_since is not None else 0.0)
        self._idle_s = 0.0
        if self._idle_since is not None:
            self._idle_since = now
        return idle

    def _drop_stale(self, policy_version: int) -> int:
        """Move finished groups staler than ``max_staleness`` back to the queue's head."""
        floor = policy_version - self.max_staleness
        stale = [g for g in self.finished if g.staler_than(floor)]
        if not stale:
            return 0
        self.finished = [g for g in self.finished if g not in stale]
        for group in reversed(stale):
            logger.info("prompt %s dropped: generated from version %s, training %d "
                        "(off_policy.max_staleness=%d); generating it again", group.uid,
                        group.oldest_version(), policy_version, self.max_staleness)
            group.requests, group.seconds = [], 0.0
            self.waiting.appendleft(group)
        self.dropped_total += len(stale)
        self._dropped_since_take += len(stale)
        self.changed.set()
        return len(stale)


async def _wait(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; True when it was set."""
    try:
        await asyncio.wait_for(event.wait(), max(timeout, 0.0))
    except TimeoutError:
        return False
    return True


__all__ = ["PromptGroup", "RolloutProducer", "TakeStats"]
