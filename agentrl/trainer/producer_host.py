"""The off-policy rollout's own process: a Ray actor holding the agent loop and its producer.

    host = start_producer_host(rollout, tokenizer_source, model_path, chat_kwargs,
                               n=8, max_staleness=1, total_batches=100)
    ray.get(host.start.remote(0))
    ray.get(host.add_batch.remote(batch_dict))            # the trainer pushes the data order
    reply = ray.get(host.take_batch.remote(16, 0, meta_info, 2.0))   # an int: not ready yet

``ProducerHost`` is the ``RolloutProducer`` (producer.py) in a process of its own: the
producer's methods (``start``, ``add_batch``, ``set_version``, ``wait_idle``, ``state_dict``,
...) are the actor's, inherited, and the trainer calls each by its name on the actor handle
(trainer/off_policy.py). What the process adds is here: building its rollout, a take that
collects the groups into a DataProto, the canary's drains, its stacks, and closing it all.

The actor builds the rollout a worker builds (``agentrl.workers.rollout_assembly.build_rollout``:
an inference-backend client of the rollout servers, ``rollout`` being the plain rollout
config with the servers' URLs (its backend's plugin builds HTTP clients of them), and the
engine of the config's kind: the ``AsyncRolloutEngine`` with the configured tools and
interactions, or in agent mode (``rollout.agent_function``) an ``AgentRollout`` that runs
each sample's episode through its own session of an in-process gateway) on a
``LoopThread``, and produces over its engine. In its own process the agent loop's Python
work never holds the trainer's interpreter lock. The actor is threaded
(``max_concurrency``), so ``stacks`` answers while a ``take_batch`` waits: the trainer's hang
watchdog reports this process's threads and tasks through it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from typing import Any

from agentrl.protocol import DataProto
from agentrl.trainer.producer import RolloutProducer, TakeStats
from agentrl.utils.trace import TraceRecorder
from agentrl.workers.rollout_assembly import with_backend_metrics

_CONCURRENCY = 4  # take_batch, stacks, and the control calls at once


class ProducerHost(RolloutProducer):
    """The actor's body (module docstring): a `RolloutProducer` over the rollout it builds,
    with what its process adds; it overrides none of the producer's methods."""

    def __init__(
        self,
        rollout: dict[str, Any],
        tokenizer_source: Mapping[str, Any],
        model_path: str,
        chat_template_kwargs: Mapping[str, Any] | None,
        *,
        n: int,
        max_staleness: int,
        total_batches: int,
        trace: bool = False,
    ) -> None:
        from agentrl.models.tokenizer import load_tokenizer
        from agentrl.utils.aio import LoopThread
        from agentrl.workers.rollout_assembly import build_rollout
        from agentrl.workers.rollout_settings import RolloutSettings

        # the rollout a worker would build (its engine kind: the engine, or agent mode's
        # AgentRollout), with an HTTP client of the servers, on this process's loop
        loop = LoopThread("agentrl-producer")
        model = {"path": model_path, "trust_remote_code": tokenizer_source["trust_remote_code"],
                 "custom_chat_template": tokenizer_source["chat_template"]}
        self.rollout = build_rollout(
            RolloutSettings.from_config({"rollout": rollout, "model": model}),
            load_tokenizer(**dict(tokenizer_source)), loop=loop,
            chat_template_kwargs=chat_template_kwargs,
        )  # fmt: skip
        # each sync's version reaches the servers' client: a server that restarted rejoins
        # only holding it
        hold = functools.partial(_servers_hold, self.rollout.backend)
        super().__init__(self.rollout.engine, loop, n=n, max_staleness=max_staleness,
                         total_batches=total_batches, on_version=hold,
                         trace=TraceRecorder("producer") if trace else None)  # fmt: skip

    def ready(self) -> bool:
        """True once built (the constructor raised otherwise: a bad tool fails here)."""
        return True

    def take_batch(
        self, count: int, policy_version: int, meta_info: dict[str, Any], timeout: float
    ) -> tuple[DataProto, TakeStats] | int:
        """The next ``count`` fresh groups as one DataProto (with the backend's metrics), with
        the take's stats; when they are not ready within ``timeout`` seconds, the number of
        groups finished so far."""
        taken = self.take(count, policy_version, timeout)
        if taken is None:
            return len(self.finished)
        groups, stats = taken
        # with the backend's own counts since the last take (lost and revived servers,
        # retries, `rollout/servers_alive`), as the in-step rollout reports them
        return with_backend_metrics(self.collect(groups, meta_info), self.rollout.backend), stats

    def set_drained(self, drained: Mapping[str, str]) -> None:
        """Drain the servers the workers' canary drained (url -> why: no new calls, calls in
        flight there fail over) and re-admit the others it had drained
        (agentrl/workers/canary.py)."""
        backend = self.rollout.backend
        if hasattr(backend, "drain"):
            self.loop.run(_set_drained(backend, dict(drained)))

    def stacks(self) -> str:
        """This process's thread stacks and the rollout loop's tasks (the watchdog)."""
        from agentrl.trainer.watchdog import format_task_stacks, format_thread_stacks

        tasks = format_task_stacks({"async-rollout": self.loop.loop}) or "(none)"
        return f"threads:\n{format_thread_stacks()}\nasyncio tasks:\n{tasks}"

    def close(self) -> None:
        """Cancel what is in flight, then close the rollout (backend client), its engine (the
        engine's check process) and the loop, each even when one before it raised."""
        with contextlib.ExitStack() as closing:  # runs last-in first-out
            closing.callback(self.loop.close)
            closing.callback(self.engine.close)
            closing.callback(self.rollout.close)
            self.stop()


async def _servers_hold(backend: Any, version: int) -> None:
    """The workers synced (and verified) ``version`` on the servers they reached: this
    process's client routes to a server only while it reports that version, so one that
    restarted (holding the launch's weights) rejoins once a sync has reached it
    (``ServerBackend.expect_version``; the workers' sync loads and verifies it). A module
    function, not a method: the actor keeps no coroutine member (it stays threaded)."""
    if hasattr(backend, "expect_version"):
        await backend.expect_version(str(version))


async def _set_drained(backend: Any, drained: dict[str, str]) -> None:
    """On the backend's loop (a drain cancels the calls in flight there)."""
    for url in backend.drained():
        if url not in drained:
            backend.readmit(url)
    for url, why in drained.items():
        if url not in backend.drained():
            backend.drain(url, why)


def start_producer_host(*args: Any, **kwargs: Any) -> Any:
    """A ``ProducerHost`` Ray actor (``ray`` initialised), built and ready."""
    import ray

    actor = ray.remote(num_cpus=0, max_concurrency=_CONCURRENCY)(ProducerHost)
    host = actor.remote(*args, **kwargs)
    ray.get(host.ready.remote())
    return host


__all__ = ["ProducerHost", "start_producer_host"]
