"""OffPolicyTrainer: the off-policy modes, ``trainer.mode: one_step_off | async``.

    from agentrl.trainer import create_trainer
    trainer = create_trainer(cfg)      # PPOTrainer for sync, OffPolicyTrainer otherwise
    history = trainer.fit(); trainer.close()

The rollout runs on inference servers of its own, which the backend's plugin launches
(agentrl/rollout/backends/registry.py): ``agentrl serve`` processes for ``rollout.name=hf``
(the embedded engine, one process per server), SGLang or vLLM servers for ``sglang`` and
``vllm``; or the servers at ``server_urls``. The workers' rollout keeps its backend name and
gets the servers' URLs, so its plugin builds HTTP clients of them. A ``RolloutProducer`` (producer.py) drives
them from a process of its own (a Ray actor, producer_host.py) and keeps generating while
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
with a `ProducerBatchSource` (batch_source.py), which adds the servers, the producer and its
versions, and the producer's share of a checkpoint (the finished groups not trained yet and
the unfinished prompts, so a resumed run trains every prompt once).
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
from agentrl.trainer.dynamic_sampling import collect_informative
from agentrl.trainer.ppo_trainer import PPOTrainer
from agentrl.trainer.producer import TakeStats
from agentrl.trainer.scoring import isolate_failed, score, settle_infra_failures
from agentrl.trainer.step_context import StepContext
from agentrl.trainer.worker_setup import init_ray, stop_ray, with_rollout

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


class ProducerBatchSource:
    """The off-policy batch source: servers of its own, a producer that keeps generating on
    them, each step's batch taken from its finished groups, the weights synced after the
    update (module docstring)."""

    sync_weights_in_update = False  # the step syncs when the producer allows

    def __init__(self, config: DictConfig) -> None:
        self.config = config
        self.mode = str(config.trainer.mode)
        self.host: Any = None  # the ProducerHost actor
        self.batches: Iterator[dict[str, Any]] | None = None
        self.stats: list[TakeStats] = []  # the step's takes
        self._started = False
        self._launcher: Any = None
        self._ray_temp_dir: str | None = None  # a Ray started here (stopped by closing)
        self._restored: dict[str, Any] | None = None  # a checkpoint's producer state
        self._threads_before: int | None = None
        self._rollout: dict[str, Any] = {}  # the workers' rollout config (prepare_workers)

    # ------------------------------------------------------------------ setup

    def prepare_workers(self, worker_config: DictConfig) -> DictConfig:
        """Start the inference servers; the workers' config is a copy of `worker_config`
        whose rollout points at them (`worker_config` itself is not changed)."""
        # the workers' rollout (their canary's prompts filled in: worker_setup.worker_config)
        rollout = OmegaConf.to_container(worker_config.actor_rollout_ref.rollout, resolve=True)
        urls = self._start_servers(rollout)
        if not rollout["server_urls"]:
            logger.info("%s: the workers reach the %s rollout servers over HTTP: %s",
                        self.mode, rollout["name"], ", ".join(urls))
        rollout.update(server_urls=urls, control_urls=[], free_cache_engine=False)
        self._rollout = rollout
        return with_rollout(worker_config, rollout)

    def workers_started(self, ctx: StepContext) -> None:
        """The producer's process (producer_host.py), its stacks in the watchdog's reports."""
        import ray

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
            "async-rollout", lambda: ray.get(self.host.stacks.remote(), timeout=30)
        )

    def _start_servers(self, rollout: dict[str, Any]) -> list[str]:
        from agentrl.rollout.backends.factory import server_launcher

        if rollout["server_urls"]:
            return list(rollout["server_urls"])
        model, env = self.config.actor_rollout_ref.model, None
        if not torch.cuda.is_available():  # servers and trainer share the CPU cores
            server_threads, trainer_threads = cpu_split(int(rollout["num_servers"] or 1))
            env = {"OMP_NUM_THREADS": str(server_threads)}
            self._threads_before = torch.get_num_threads()  # restored by closing
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

    def _call(self, method: str, *args: Any) -> Any:
        """`ProducerHost.method(*args)` in its process, waited for."""
        import ray

        return ray.get(getattr(self.host, method).remote(*args))

    # ------------------------------------------------------------------ the steps

    def start(self, ctx: StepContext, batches: Iterator[dict[str, Any]],
              global_step: int) -> None:  # fmt: skip
        self.batches = batches
        if self._restored is not None:
            self._call("load_state_dict", self._restored)
            self._restored = None
        self._call("start", global_step)
        self._started = True
        self._feed()

    def _feed(self) -> None:
        """Push the loader batches the producer's throttle lets start (the data order stays
        in this process, so a checkpoint's loader position and buffer agree)."""
        for _ in range(self._call("batches_wanted")):
            self._call("add_batch", next(self.batches))

    def next_batch(self, ctx: StepContext, step: int,
                   timing: dict[str, float]) -> tuple[DataProto, dict[str, float]]:  # fmt: skip
        """Finished groups from the producer (stage `wait_for_rollouts`), scored; with
        `algorithm.filter_groups`, the sync step's dynamic sampling (dynamic_sampling.py)
        over further takes, each granting the producer one more loader batch."""
        self.stats = []
        data = self._take_scored(ctx, step, timing)
        if not ctx.algorithm.filter_groups.enable:
            return data, {}

        def more(round_: int) -> DataProto:
            self._call("allow_more", 1)
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
            reply = self._call("take_batch", int(ctx.data.train_batch_size), step - 1,
                               meta, _POLL_S)
            if not isinstance(reply, int):
                return reply
            if reply != finished:
                finished = reply
                ctx.watchdog.beat("wait_for_rollouts")

    def after_update(self, ctx: StepContext, step: int,
                     timing: dict[str, float]) -> dict[str, float]:  # fmt: skip
        """Weight sync (one_step_off: once nothing is generating), the producer's new
        version, and the batches its throttle now lets start."""
        metrics = {}
        with ctx.stage("weight_sync", timing):
            if self.mode == "one_step_off":
                metrics["async/sync_wait_s"] = self._call("wait_idle")
            synced = ctx.models.actor_rollout.sync_rollout_weights()
            # the producer routes around the servers the workers' canary drained
            self._call("set_drained", drained_servers(ctx.models.actor_rollout.drained_servers()))
            self._call("set_version", step)
        metrics |= verified_metrics(synced)
        if ctx.trace.enabled:  # what the producer did meanwhile, beside the trainer's stages
            ctx.trace.add(self._call("drain_trace"))
        self._feed()
        return metrics

    def step_metrics(self, data: DataProto, step: int,
                     timing: dict[str, float]) -> dict[str, float]:  # fmt: skip
        metrics = take_metrics(self.stats, timing["wait_for_rollouts"], step - 1)
        return metrics | staleness_metrics(
            data.batch["rollout_versions"], data.batch["response_mask"], step - 1
        )

    def stop(self) -> None:
        """Cancel the producer's work in flight and close its engine (once; `closing` calls
        it too, for a start that failed half-way)."""
        self.batches = None
        if self._started:
            self._started = False
            self._call("close")

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        if not self._started:
            return {}
        # with the loader's position it goes with (both pushed from this process)
        return {"rollout_buffer": self._call("state_dict")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restored = state.get("rollout_buffer")

    # ------------------------------------------------------------------ teardown

    @contextlib.contextmanager
    def closing(self) -> Iterator[None]:
        """The producer goes first, then (the body) the workers, then Ray when it was
        started here, the servers and the trainer's thread count."""
        try:
            if self.host is not None:
                import ray

                self.stop()
                ray.kill(self.host)
                self.host = None
            yield
        finally:
            try:
                stop_ray(self._ray_temp_dir)
                self._ray_temp_dir = None
            finally:
                if self._launcher is not None:
                    self._launcher.stop()
                    self._launcher = None
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
