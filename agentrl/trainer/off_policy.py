"""OffPolicyTrainer: the off-policy modes, ``trainer.mode: one_step_off | async``.

    from agentrl.trainer import create_trainer
    trainer = create_trainer(cfg)      # PPOTrainer for sync, OffPolicyTrainer otherwise
    history = trainer.fit(); trainer.close()

The rollout runs on inference servers of its own, which the backend's plugin launches
(agentrl/rollout/backends/registry.py): ``agentrl serve`` processes for ``rollout.name=hf``
(the embedded engine, one process per server), SGLang or vLLM servers for ``sglang`` and
``vllm``; or the servers at ``server_urls``. The workers' rollout keeps its backend name and
gets the servers' URLs, so its plugin builds HTTP clients of them. A ``RolloutProducer`` (producer.py) drives
them from a process of its own (``ProducerHost``, a Ray actor, producer_host.py) and keeps generating while
the actor trains in its workers; this process pushes it the loader's batches as its throttle
allows. The actor's workers reach the same servers for validation and weight sync. A step:

    take train_batch_size finished prompt groups (stage wait_for_rollouts) -> reward
       [algorithm.filter_groups: drop groups whose rewards do not vary, grant the producer
        one more loader batch and take again, until train_batch_size groups are kept]
    -> policy_step.policy_step: old log-probs under the current policy, advantages,
       critic and actor updates (the rollout correction weighs each token's loss by
       pi_old / pi_rollout, truncated: on by default, ``off_policy.rollout_correction``)
    -> one_step_off: wait until nothing is generating -> weight sync -> set_version(step)

Everything from the reward on is the sync trainer's code: `OffPolicyTrainer` is `PPOTrainer`
with a `ProducerBatchSource` (a `BatchSource`, batch_source.py), which adds the servers, the
producer and its versions, and the producer's share of a checkpoint (the finished groups not
trained yet and the unfinished prompts, so a resumed run trains every prompt once). It calls
the producer's process by its methods on the actor handle (``self.host.take_batch.remote``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from agentrl.config import chat_template_kwargs
from agentrl.distributed.worker import free_address
from agentrl.protocol import DataProto
from agentrl.rollout.output import model_token_versions
from agentrl.trainer.batch_source import BatchSource, Update
from agentrl.trainer.dynamic_sampling import collect_informative
from agentrl.trainer.ppo_trainer import PPOTrainer
from agentrl.trainer.producer import TakeStats
from agentrl.trainer.scoring import isolate_failed, score, settle_infra_failures
from agentrl.trainer.step_context import StepContext
from agentrl.trainer.worker_setup import Workers, init_ray, start_workers, stop_ray, with_rollout

logger = logging.getLogger(__name__)

# the trainer asks the producer for its batch this often (each answer is watchdog progress)
_POLL_S = 2.0


def staleness_metrics(
    versions: torch.Tensor, response_mask: torch.Tensor, policy_version: int
) -> dict[str, float]:
    """Per trajectory with model tokens: ``policy_version`` minus its oldest token's version
    (mean, max), how many versions wrote it, and how many trajectories more than one did
    (partial episodes: a weight update came between their calls). ``versions`` (B, R) is the rollout's
    ``rollout_versions``; ``response_mask`` (B, R) marks the model's tokens."""
    rows = [model_token_versions(v, m) for v, m in zip(versions, response_mask, strict=True)]
    rows = [row for row in rows if row]  # trajectories the model wrote tokens of
    if not rows:
        return {}
    staleness = [policy_version - row[0] for row in rows]
    return {
        "async/staleness/mean": float(np.mean(staleness)),
        "async/staleness/max": float(max(staleness)),
        "async/versions_per_trajectory/mean": float(np.mean([len(row) for row in rows])),
        # trajectories (agent mode: episodes) that a weight update reached in the middle
        "async/partial_episodes": float(sum(len(row) > 1 for row in rows)),
    }


def take_metrics(stats: list[TakeStats], waited_s: float,
                 policy_version: int) -> dict[str, float]:  # fmt: skip
    """The step's ``async/*`` metrics of the producer over the step's takes (more than one
    with algorithm.filter_groups); ``waited_s``: the trainer's wait."""
    return {
        "async/buffer_size": float(stats[-1].buffer_size),
        "async/trainer_idle_s": waited_s,
        "async/rollout_idle_s": sum(s.rollout_idle_s for s in stats),
        "async/dropped_stale": float(sum(s.dropped for s in stats)),
        "async/policy_version": float(policy_version),
    }


def cpu_split(num_servers: int, cores: int | None = None) -> tuple[int, int]:
    """``(threads per server, trainer threads)`` on a CPU machine: the servers share half
    the cores, the trainer keeps the rest, so generation and training overlap instead of
    oversubscribing the cores (OpenMP threads that spin against each other)."""
    cores = cores or os.cpu_count() or 1
    rollout = max(1, cores // 2)
    return max(1, rollout // num_servers), max(1, cores - rollout)


def server_host(config: DictConfig) -> str:
    """Where the servers this process launches listen, and so the address the workers and
    the producer call: 127.0.0.1 for a run on this machine; on a Ray cluster
    (``ray_init.address``) this node's address as Ray knows it, since the ranks and the
    producer may run on any node."""
    if config.ray_init.address is None:
        return "127.0.0.1"
    init_ray(config)  # connected (nothing to stop later): Ray says this node's address
    return free_address()[0]


def verified_metrics(synced: Any) -> dict[str, float]:
    """``rollout/weights_verified`` and the canary's ``rollout/canary/*`` of a sync: the
    largest value over the ranks (each rank's result, or one rank's dict; only the ranks
    that asked the servers report the canary), as the sync mode's update reports them."""
    results = [r for r in (synced if isinstance(synced, list) else [synced])
               if isinstance(r, dict)]  # fmt: skip
    out: dict[str, float] = {}
    for result in results:
        for key, value in result.items():
            if key == "rollout/weights_verified" or key.startswith("rollout/canary/"):
                out[key] = max(out.get(key, float(value)), float(value))
    return out


def drained_servers(reported: Any) -> dict[str, str]:
    """The servers any rank's canary drained (url -> why), from ``drained_servers``."""
    out: dict[str, str] = {}
    for result in reported if isinstance(reported, list) else [reported]:
        out |= dict(result or {})
    return out


def _wait(answer: Any, timeout: float | None = None) -> Any:
    """The answer of a call to the producer's process (``host.<method>.remote(...)``)."""
    import ray

    return ray.get(answer, timeout=timeout)


class ProducerBatchSource(BatchSource):
    """The off-policy batch source: servers of its own, a producer that keeps generating on
    them, each step's batch taken from its finished groups, the weights synced after the
    update (module docstring)."""

    def __init__(self, config: DictConfig) -> None:
        self.config = config
        self.mode = str(config.trainer.mode)
        self.host: Any = None  # the ProducerHost actor (producer_host.py)
        self.batches: Iterator[dict[str, Any]] | None = None
        self.stats: list[TakeStats] = []  # the step's takes
        self._started = False
        self._launcher: Any = None
        self._ray_temp_dir: str | None = None  # a Ray started here (stopped by close)
        self._threads_before: int | None = None
        self._rollout: dict[str, Any] = {}  # the workers' rollout config, with the servers

    # ------------------------------------------------------------------ setup

    def start_workers(self, config: DictConfig, worker_config: DictConfig) -> Workers:
        """Start the inference servers, then the workers with a copy of `worker_config`
        whose rollout points at them (`worker_config` itself is not changed)."""
        return start_workers(config, self.workers_config(worker_config))

    def workers_config(self, worker_config: DictConfig) -> DictConfig:
        """Start the servers; the workers' config: `worker_config` pointing at them."""
        # the workers' rollout (their canary's prompts filled in: worker_setup.worker_config)
        rollout = OmegaConf.to_container(worker_config.actor_rollout_ref.rollout, resolve=True)
        urls = self._start_servers(rollout)
        if not rollout["server_urls"]:
            logger.info("%s: the workers reach the %s rollout servers over HTTP: %s",
                        self.mode, rollout["name"], ", ".join(urls))
        rollout.update(server_urls=urls, control_urls=[], free_cache_engine=False)
        self._rollout = rollout
        return with_rollout(worker_config, rollout)

    def _start_servers(self, rollout: dict[str, Any]) -> list[str]:
        from agentrl.rollout.backends.factory import server_launcher

        if rollout["server_urls"]:
            return list(rollout["server_urls"])
        model, env = self.config.actor_rollout_ref.model, None
        if not torch.cuda.is_available():  # servers and trainer share the CPU cores
            server_threads, trainer_threads = cpu_split(int(rollout["num_servers"] or 1))
            env = {"OMP_NUM_THREADS": str(server_threads)}
            self._threads_before = torch.get_num_threads()  # restored by close
            torch.set_num_threads(trainer_threads)
            logger.info("%s on CPU: %d thread(s) per rollout server, %d for training",
                        self.mode, server_threads, trainer_threads)
        self._launcher = server_launcher(
            rollout, str(model.path), seed=int(self.config.trainer.seed),
            trust_remote_code=bool(model.trust_remote_code), env=env,
            host=server_host(self.config),
        )  # fmt: skip
        urls = self._launcher.start()
        logger.info("%s: rollout servers %s", self.mode, ", ".join(urls))
        return urls

    def _start_host(self, ctx: StepContext) -> None:
        """The producer's process (producer_host.py), its stacks in the watchdog's reports."""
        from agentrl.trainer.producer_host import start_producer_host

        cfg, model, rollout = self.config, self.config.actor_rollout_ref.model, self._rollout
        self._ray_temp_dir = init_ray(cfg)
        self.host = start_producer_host(
            rollout,
            {"path": str(cfg.data.tokenizer or model.path),
             "trust_remote_code": bool(cfg.data.trust_remote_code),
             "chat_template": model.custom_chat_template},
            str(model.path),
            chat_template_kwargs(cfg),
            n=int(rollout["n"]), max_staleness=int(cfg.off_policy.max_staleness),
            total_batches=ctx.total_training_steps, trace=ctx.trace.enabled,
        )  # fmt: skip
        ctx.watchdog.register_source(
            "async-rollout", lambda: _wait(self.host.stacks.remote(), timeout=30)
        )

    # ------------------------------------------------------------------ the steps

    @contextlib.contextmanager
    def running(self, ctx: StepContext, batches: Iterator[dict[str, Any]], global_step: int,
                resumed: dict[str, Any]) -> Iterator[None]:  # fmt: skip
        """The producer (its process started the first time) with the buffer of the
        checkpoint the run `resumed` from, started at `global_step`'s version and fed;
        stopped after the steps."""
        if self.host is None:
            self._start_host(ctx)
        self.batches = batches
        if resumed.get("rollout_buffer") is not None:
            _wait(self.host.load_state_dict.remote(resumed["rollout_buffer"]))
        _wait(self.host.start.remote(global_step))
        self._started = True
        try:
            self._feed()
            yield
        finally:
            self._stop()

    def _feed(self) -> None:
        """Push the loader batches the producer's throttle lets start (the data order stays
        in this process, so a checkpoint's loader position and buffer agree)."""
        for _ in range(_wait(self.host.batches_wanted.remote())):
            _wait(self.host.add_batch.remote(next(self.batches)))

    def run_step(self, ctx: StepContext, step: int, timing: dict[str, float],
                 update: Update) -> tuple[DataProto, dict[str, float]]:  # fmt: skip
        """The step's batch (`_next_batch`), `update` (the actor does not sync), the weight
        sync (`_sync_weights`), and the producer's `async/*` metrics of the step."""
        data, metrics = self._next_batch(ctx, step, timing)
        data = update(data, sync_weights=False, metrics=metrics)
        metrics |= self._sync_weights(ctx, step, timing)
        metrics |= take_metrics(self.stats, timing["wait_for_rollouts"], step - 1)
        return data, metrics | staleness_metrics(
            data.batch["rollout_versions"], data.batch["response_mask"], step - 1
        )

    def _next_batch(self, ctx: StepContext, step: int,
                    timing: dict[str, float]) -> tuple[DataProto, dict[str, float]]:  # fmt: skip
        """Finished groups from the producer (stage `wait_for_rollouts`), scored; with
        `algorithm.filter_groups`, the sync step's dynamic sampling (dynamic_sampling.py)
        over further takes, each granting the producer one more loader batch."""
        self.stats = []
        data = self._take_scored(ctx, step, timing)
        if not ctx.algorithm.filter_groups.enable:
            return data, {}

        def more(round_: int) -> DataProto:
            _wait(self.host.allow_more.remote(1))
            self._feed()
            return self._take_scored(ctx, step, timing)

        return collect_informative(data, more, ctx.algorithm.filter_groups,
                                   int(ctx.data.train_batch_size), step)  # fmt: skip

    def _take_scored(self, ctx: StepContext, step: int, timing: dict[str, float]) -> DataProto:
        """One batch's worth of finished groups, scored as the sync step scores a batch."""
        with ctx.stage("wait_for_rollouts", timing):
            data, stats = self._take(ctx, step)
        self.stats.append(stats)
        ctx.trace.request(data)  # trainer.trace: the update records its spans
        isolate_failed(data)
        with ctx.stage("reward", timing):
            data = score(data, ctx.reward_fn, ctx.models.reward_model)
        settle_infra_failures(data, ctx.rollout.on_infra_error, step)
        return data

    def _take(self, ctx: StepContext, step: int) -> tuple[Any, TakeStats]:
        """Step `step`'s batch from the producer; each group it finishes meanwhile is
        progress for the watchdog."""
        meta = {"temperature": float(ctx.rollout.temperature), "global_steps": step}
        finished = -1
        while True:
            reply = _wait(self.host.take_batch.remote(int(ctx.data.train_batch_size),
                                                      step - 1, meta, _POLL_S))  # fmt: skip
            if not isinstance(reply, int):
                return reply
            if reply != finished:
                finished = reply
                ctx.watchdog.beat("wait_for_rollouts")

    def _sync_weights(self, ctx: StepContext, step: int,
                      timing: dict[str, float]) -> dict[str, float]:  # fmt: skip
        """Weight sync (one_step_off: once nothing is generating), the producer's new
        version, and the batches its throttle now lets start."""
        metrics = {}
        with ctx.stage("weight_sync", timing):
            if self.mode == "one_step_off":
                metrics["async/sync_wait_s"] = _wait(self.host.wait_idle.remote())
            synced = ctx.models.actor_rollout.sync_rollout_weights()
            # the producer routes around the servers the workers' canary drained
            drained = drained_servers(ctx.models.actor_rollout.drained_servers())
            _wait(self.host.set_drained.remote(drained))
            _wait(self.host.set_version.remote(step))
        metrics |= verified_metrics(synced)
        if ctx.trace.enabled:  # what the producer did meanwhile, beside the trainer's stages
            ctx.trace.add(_wait(self.host.drain_trace.remote()))
        self._feed()
        return metrics

    def _stop(self) -> None:
        """Cancel the producer's work in flight and close its engine (once; `close` calls
        it too, for a start that failed half-way)."""
        self.batches = None
        if self._started:
            self._started = False
            _wait(self.host.close.remote())

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The producer's buffer and queue (`running` restores them), while it runs."""
        if not self._started:
            return {}
        # with the loader's position it goes with (both pushed from this process)
        return {"rollout_buffer": _wait(self.host.state_dict.remote())}

    # ------------------------------------------------------------------ teardown

    def close(self, workers: Workers | None) -> None:
        """The producer goes first, then the workers, then Ray when it was started here,
        the servers and the trainer's thread count: each step even when one before it
        raised."""
        with contextlib.ExitStack() as closing:  # runs last-in first-out
            closing.callback(self._restore_threads)
            closing.callback(self._stop_servers)
            closing.callback(self._stop_ray)
            closing.callback(super().close, workers)
            if self.host is not None:
                closing.callback(self._kill_host)
                self._stop()

    def _kill_host(self) -> None:
        import ray

        ray.kill(self.host)
        self.host = None

    def _stop_ray(self) -> None:
        stop_ray(self._ray_temp_dir)
        self._ray_temp_dir = None

    def _stop_servers(self) -> None:
        if self._launcher is not None:
            self._launcher.stop()
            self._launcher = None

    def _restore_threads(self) -> None:
        if self._threads_before is not None:
            torch.set_num_threads(self._threads_before)
            self._threads_before = None


class OffPolicyTrainer(PPOTrainer):
    """`PPOTrainer` with the off-policy batch source (`trainer.mode: one_step_off | async`);
    it overrides nothing."""

    def __init__(self, config: DictConfig) -> None:
        super().__init__(config, source=ProducerBatchSource(config))
        self.mode = self.source.mode



__all__ = [
    "OffPolicyTrainer",
    "ProducerBatchSource",
    "cpu_split",
    "drained_servers",
    "server_host",
    "staleness_metrics",
    "take_metrics",
    "verified_metrics",
]
