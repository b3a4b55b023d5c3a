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
session, with the same four methods: ``new_context``, ``build_requests``, ``run_request``,
``collect``) runs on an event loop in its own thread (``loop``, a ``LoopThread``), one
coroutine per prompt group (``rollout.n`` requests), all sharing one batch context, so
``max_concurrent_requests`` bounds the whole producer. Each of the trainer's calls runs on
that loop too (``on_loop``), one method per operation. The trainer runs it in a process of
its own (``ProducerHost``, a Ray actor): the agent loop's Python work (templates, tokenizer,
HTTP) then never competes with the update for the trainer's interpreter lock.

Versions. Policy version v is the actor after v updates; the servers report the version
of every generation call and each model token keeps it (``AsyncRolloutRequest.weight_versions``).
The trainer's step s updates version s - 1, so a trajectory's staleness at step s is
``s - 1 - (its oldest token's version)``.

Throttle. A prompt of loader batch b (1-based) starts only once the servers hold version
``b - 1 - max_staleness`` or newer, so at most ``max_staleness + 1`` batches are generating
or waiting, and a prompt consumed by its own step is never too stale. A step that needs more
than one batch's worth of groups (DAPO's dynamic sampling dropped those whose rewards do not
vary) grants more with ``allow_more``: each grant lets one more batch start, as if the
versions were one further ahead, so the bound stays ``max_staleness + 1`` batches beyond
what the trainer has taken. One that waits past
its step (a long tail) can be; ``take`` drops such groups before they reach the trainer,
counts them, and starts their prompts again from scratch, so every prompt still trains
exactly once.

Partial rollouts. A weight update lands on the servers between two generation calls (agentrl
serve: between micro-batches), never inside one; requests in flight keep going, their
next turn under the new weights. With ``one_step_off`` the trainer instead waits until the
producer is idle before it syncs (``wait_idle``), so each batch is generated under one
version (verl's one-step-off).

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
import functools
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.protocol import DataProto, to_object_array
from agentrl.rollout.request import AsyncRolloutRequest
from agentrl.utils.trace import Event, TraceRecorder

logger = logging.getLogger(__name__)


@dataclass
class PromptGroup:
    """One prompt of the data order and, once finished, its ``n`` requests."""

    uid: str  # "{batch}-{row}": the prompt's place in the data order
    batch_index: int  # the loader batch (1-based) it came from
    prompt: DataProto  # the one-row prompt batch, uid column included
    requests: list[AsyncRolloutRequest] = field(default_factory=list)
    seconds: float = 0.0
    started_version: int = 0  # the servers' version when its generation started

    @property
    def versions(self) -> list[int]:
        """The policy versions of its model tokens (loss-mask 1), each once, sorted."""
        return sorted({v for r in self.requests
                       for v, m in zip(r.weight_versions, r.loss_mask, strict=True) if m})

    def oldest_version(self) -> int | None:
        """The oldest policy version among its model tokens; None when it has none."""
        versions = self.versions
        if versions and versions[0] < 0:
            raise RuntimeError(
                f"prompt {self.uid}: the inference backend reported no weight_version for "
                "some generations; the off-policy modes need it on every generation call"
            )
        if versions and versions[0] < self.started_version:
            raise RuntimeError(
                f"prompt {self.uid}: the inference servers reported weight version "
                f"{versions[0]} for a generation started after version "
                f"{self.started_version} was synced; a weight update did not reach them"
            )
        return versions[0] if versions else None


@dataclass
class TakeStats:
    """What one ``take`` saw: the per-step ``async/*`` metrics come from it."""

    rollout_idle_s: float  # time the producer had nothing to generate since the last take
    dropped: int  # groups dropped as too stale (their prompts are generated again)
    buffer_size: int  # finished groups left waiting after the take


def on_loop(function: Callable[..., Any]) -> Callable[..., Any]:
    """A producer method run on the producer's loop thread, the caller waiting for it: the
    state it reads and changes is the loop's (its tasks, its ``asyncio.Event``). A coroutine
    method is awaited there. The wrapper is a plain function (see ``_produce``)."""
    is_coroutine = inspect.iscoroutinefunction(function)

    @functools.wraps(function)
    def call(self: RolloutProducer, *args: Any, **kwargs: Any) -> Any:
        if is_coroutine:
            return self.loop.run(function(self, *args, **kwargs))

        async def on_the_loop() -> Any:
            return function(self, *args, **kwargs)

        return self.loop.run(on_the_loop())

    return call


class RolloutProducer:
    """See the module docstring."""

    def __init__(
        self,
        engine: Any,
        loop: Any,
        *,
        n: int,
        max_staleness: int,
        total_batches: int,
        trace: TraceRecorder | None = None,
    ) -> None:
        self.engine, self.loop, self.n = engine, loop, n
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
        self._changed: asyncio.Event | None = None
        self._main: asyncio.Task | None = None
        self._ctx: Any = None
        self._idle_since: float | None = None
        self._idle_s = 0.0
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ the trainer's calls

    @property
    def started(self) -> bool:
        return self._main is not None

    @on_loop
    def start(self, version: int) -> None:
        """Start producing with the servers at policy ``version``."""
        self.version = version
        self._changed = asyncio.Event()
        self._ctx = self.engine.new_context(validate=False, trace=self.trace)
        self._main = asyncio.ensure_future(_produce(self))

    @on_loop
    def set_version(self, version: int) -> None:
        """The servers now hold ``version`` (called after each weight sync)."""
        self.version = version
        self._changed.set()

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
        self._changed.set()

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
        self._changed.set()

    @on_loop
    async def take(
        self, count: int, policy_version: int, timeout: float | None = None
    ) -> tuple[list[PromptGroup], TakeStats] | None:
        """Block until ``count`` finished groups at most ``max_staleness`` versions older
        than ``policy_version`` are ready; return them (first finished first). With
        ``timeout``: None when they are not ready by then."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        while True:
            if self._error is not None:
                raise RuntimeError("the rollout producer failed") from self._error
            self._drop_stale(policy_version)
            if len(self.finished) >= count:
                break
            if self._main is None or self._main.done():
                raise RuntimeError(
                    f"the rollout producer has stopped with {len(self.finished)} of the "
                    f"{count} groups a step needs"
                )
            if not (self.running or self.waiting):
                raise RuntimeError(
                    f"{len(self.finished)} finished groups and nothing left to generate for "
                    f"a step of {count}: push the loader's batches first (add_batch)"
                )
            self._changed.clear()
            if deadline is None:
                await self._changed.wait()
            elif not await _wait(self._changed, deadline - time.perf_counter()):
                return None
        groups, self.finished = self.finished[:count], self.finished[count:]
        dropped, self._dropped_since_take = self._dropped_since_take, 0
        self._changed.set()  # room for the throttle to look again
        return groups, TakeStats(self._idle_seconds(), dropped, len(self.finished))

    @on_loop
    async def wait_idle(self) -> float:
        """Block until nothing is generating (one_step_off, before a weight sync); returns
        the seconds waited."""
        started = time.perf_counter()
        while self.running:
            self._changed.clear()
            await self._changed.wait()
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
            "finished": [_record(g) for g in self.finished],
            "unfinished": [_record(g, with_requests=False) for g in unfinished],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``'s buffer and queue (before ``start``)."""
        self.next_batch = int(state["next_batch"])
        self.extra_batches = int(state.get("extra_batches", 0))
        self.dropped_total = int(state.get("dropped_total", 0))
        self.finished = [_group(g) for g in state["finished"]]
        self.waiting = deque(_group(g) for g in state["unfinished"])

    def stop(self) -> None:
        """Cancel the producer and every request in flight (their tools are released)."""
        if self._main is not None:
            self.loop.run(_cancel(self), timeout=120)

    # ------------------------------------------------------------------ on the loop

    def _allowed(self, batch_index: int) -> bool:
        return self.version + self.extra_batches >= batch_index - 1 - self.max_staleness

    def _mark_idle(self, idle: bool) -> None:
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
        stale = [g for g in self.finished if _older_than(g.oldest_version(), floor)]
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
        self._changed.set()
        return len(stale)


# The producer's tasks on its loop: module functions, not methods, so that the class has no
# coroutine member and the Ray actor hosting it (producer_host.py) stays a threaded one.


async def _produce(producer: RolloutProducer) -> None:
    """Start queued prompts as the throttle allows, until stopped."""
    p = producer
    try:
        while True:
            while p.waiting and p._allowed(p.waiting[0].batch_index):
                group = p.waiting.popleft()
                group.started_version = p.version
                task = asyncio.ensure_future(_run(p, group))
                p.running[group.uid] = (group, task)
            p._mark_idle(not p.running)
            p._changed.clear()
            await p._changed.wait()
    except asyncio.CancelledError:
        raise
    except BaseException as err:  # a bad row or a data error: the trainer sees it
        logger.exception("the rollout producer stopped")
        p._error = err
        p._changed.set()


async def _run(producer: RolloutProducer, group: PromptGroup) -> None:
    """Generate one prompt group's ``n`` requests; a failure is the trainer's in ``take``."""
    p, started = producer, time.perf_counter()
    try:
        requests = p.engine.build_requests(group.prompt, p.n)
        await asyncio.gather(*(p.engine.run_request(r, p._ctx) for r in requests))
    except asyncio.CancelledError:
        raise
    except Exception as err:  # a row the engine refuses: the trainer sees it in take
        logger.exception("prompt %s: the rollout failed", group.uid)
        p._error = err
        p._changed.set()
        return
    finally:
        p.running.pop(group.uid, None)
    group.requests, group.seconds = requests, time.perf_counter() - started
    p.finished.append(group)
    p._changed.set()


async def _cancel(producer: RolloutProducer) -> None:
    """Cancel the producer's task and its requests in flight, and wait for them."""
    tasks = [producer._main, *(task for _, task in producer.running.values())]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    producer._main = None


async def _wait(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; True when it was set."""
    try:
        await asyncio.wait_for(event.wait(), max(timeout, 0.0))
    except TimeoutError:
        return False
    return True


def _older_than(version: int | None, floor: int) -> bool:
    return version is not None and version < floor


def _record(group: PromptGroup, with_requests: bool = True) -> dict[str, Any]:
    return {"uid": group.uid, "batch_index": group.batch_index, "prompt": group.prompt,
            "requests": group.requests if with_requests else [], "seconds": group.seconds}


def _group(record: dict[str, Any]) -> PromptGroup:
    return PromptGroup(record["uid"], int(record["batch_index"]), record["prompt"],
                       list(record["requests"]), float(record["seconds"]))


__all__ = ["PromptGroup", "RolloutProducer", "TakeStats"]
