"""AsyncPPOTrainer: the off-policy modes, ``trainer.mode: one_step_off | async``.

    from agentrl.trainer import create_trainer
    trainer = create_trainer(cfg)      # PPOTrainer for sync, AsyncPPOTrainer otherwise
    history = trainer.fit(); trainer.close()

The rollout runs on inference servers of its own: ``agentrl serve`` processes launched here
for ``rollout.name=hf`` (the embedded engine, one process per server), SGLang servers for
``sglang`` (launched, or ``server_urls``). A ``RolloutProducer`` (async_rollout.py) drives
them from a process of its own (a Ray actor, producer_host.py) and keeps generating while
the actor trains in its workers; this process pushes it the loader's batches as its throttle
allows. The actor's workers reach the same servers for validation and weight sync. A step:

    take train_batch_size finished prompt groups (stage wait_for_rollouts)
    -> reward -> PPOTrainer._update: old log-probs under the current policy, advantages,
       critic and actor updates (the rollout correction weighs each token's loss by
       pi_old / pi_rollout, truncated: on by default, ``async.rollout_correction``)
    -> one_step_off: wait until nothing is generating -> weight sync -> set_version(step)

Everything from the reward on is the sync trainer's code; this file adds the servers, the
producer and its versions, and the producer's share of a checkpoint (the finished groups not
trained yet and the unfinished prompts, so a resumed run trains every prompt once).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from agentrl.rollout.output import model_token_versions
from agentrl.trainer.async_rollout import TakeStats
from agentrl.trainer.metrics import timer
from agentrl.trainer.ppo_trainer import PPOTrainer, isolate_failed

logger = logging.getLogger(__name__)

SERVE_COMMAND = (sys.executable, "-m", "agentrl.rollout.backends.serve_cli")
_HF_ENGINE_KWARGS = ("batch_wait_s", "seed", "device")
_SERVE_MAX_NUM_SEQS = 4096
_POLL_S = 2.0  # the trainer asks the producer for its batch this often (watchdog progress)  # rollout.max_num_seqs null: every waiting request joins a batch


def staleness_metrics(
    versions: torch.Tensor, response_mask: torch.Tensor, policy_version: int
) -> dict[str, float]:
    """Per trajectory with model tokens: ``policy_version`` minus its oldest token's version
    (mean, max), and how many versions wrote it. ``versions`` (B, R) is the rollout's
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
    }


def take_metrics(stats: TakeStats, waited_s: float, policy_version: int) -> dict[str, float]:
    """The step's ``async/*`` metrics of the producer; ``waited_s``: the trainer's wait."""
    return {
        "async/buffer_size": float(stats.buffer_size),
        "async/trainer_idle_s": waited_s,
        "async/rollout_idle_s": stats.rollout_idle_s,
        "async/dropped_stale": float(stats.dropped),
        "async/policy_version": float(policy_version),
    }


def cpu_split(num_servers: int, cores: int | None = None) -> tuple[int, int]:
    """``(threads per server, trainer threads)`` on a CPU machine: the servers share half
    the cores, the trainer keeps the rest, so generation and training overlap instead of
    oversubscribing the cores (OpenMP threads that spin against each other)."""
    cores = cores or os.cpu_count() or 1
    rollout = max(1, cores // 2)
    return max(1, rollout // num_servers), max(1, cores - rollout)


def serve_launcher(rollout: dict[str, Any], model: Any, seed: int,
                   env: dict[str, str] | None = None) -> Any:
    """``agentrl serve`` servers of the policy for ``rollout.name=hf`` (its engine keys as
    the server's flags)."""
    from agentrl.rollout.backends.launcher import ServerLauncher

    kwargs = dict(rollout["engine_kwargs"] or {})
    unknown = sorted(set(kwargs) - set(_HF_ENGINE_KWARGS))
    if unknown:
        raise ValueError(f"actor_rollout_ref.rollout.engine_kwargs {unknown} are not hf "
                         f"engine keys (those are {', '.join(_HF_ENGINE_KWARGS)})")
    wait = kwargs.get("batch_wait_s")
    server_args = {
        "max_num_seqs": rollout["max_num_seqs"] or _SERVE_MAX_NUM_SEQS,
        "seed": kwargs.get("seed", seed),
        "device": kwargs.get("device"),
        "dtype": rollout["dtype"] if torch.cuda.is_available() else None,
        "context_length": rollout["max_model_len"],
        "batch_wait_ms": None if wait is None else float(wait) * 1000,
        "trust_remote_code": bool(model.trust_remote_code),
    }
    return ServerLauncher(model.path, int(rollout["num_servers"] or 1), command=SERVE_COMMAND,
                          server_args=server_args, ready_timeout=rollout["launch_timeout"],
                          env=env)


class AsyncPPOTrainer(PPOTrainer):
    """See the module docstring; ``config`` is the full validated tree."""

    def __init__(self, config: DictConfig) -> None:
        super().__init__(config)
        self.mode = str(config.trainer.mode)
        self.sync_weights_in_update = False  # the step syncs when the producer allows
        self.host: Any = None  # the ProducerHost actor
        self._started = False
        self._launcher: Any = None
        self._restored: dict[str, Any] | None = None  # a checkpoint's producer state
        self._threads_before: int | None = None

    # ------------------------------------------------------------------ setup

    def init_workers(self) -> None:
        """Start the inference servers, the workers (pointed at them), and the producer."""
        rollout = OmegaConf.to_container(self.config.actor_rollout_ref.rollout, resolve=True)
        urls = self._start_servers(rollout)
        rollout.update(name="sglang", server_urls=urls, control_urls=[], free_cache_engine=False)
        self.worker_config = _with_rollout(self.worker_config, rollout)
        super().init_workers()
        self._build_producer(rollout)

    def _start_servers(self, rollout: dict[str, Any]) -> list[str]:
        from agentrl.rollout.backends.factory import server_launcher

        if rollout["name"] == "sglang" and rollout["server_urls"]:
            return list(rollout["server_urls"])
        model = self.config.actor_rollout_ref.model
        if rollout["name"] == "hf":
            env = None
            if not torch.cuda.is_available():
                server_threads, trainer_threads = cpu_split(int(rollout["num_servers"] or 1))
                env = {"OMP_NUM_THREADS": str(server_threads)}
                self._threads_before = torch.get_num_threads()  # restored by close
                torch.set_num_threads(trainer_threads)
                logger.info("%s on CPU: %d thread(s) per rollout server, %d for training",
                            self.mode, server_threads, trainer_threads)
            self._launcher = serve_launcher(rollout, model, int(self.config.trainer.seed), env)
        else:
            self._launcher = server_launcher(rollout, str(model.path))
        urls = self._launcher.start()
        logger.info("%s: rollout servers %s", self.mode, ", ".join(urls))
        return urls

    def _build_producer(self, rollout: dict[str, Any]) -> None:
        """The producer's process (producer_host.py), its stacks in the watchdog's reports."""
        import ray

        from agentrl.trainer.producer_host import start_producer_host

        cfg, model = self.config, self.config.actor_rollout_ref.model
        self._init_ray()
        self.host = start_producer_host(
            rollout,
            {"path": str(cfg.data.tokenizer or model.path),
             "trust_remote_code": bool(cfg.data.trust_remote_code),
             "chat_template": model.custom_chat_template},
            str(model.path),
            OmegaConf.to_container(cfg.data.apply_chat_template_kwargs, resolve=True),
            n=int(rollout["n"]), max_staleness=int(cfg["async"].max_staleness),
            total_batches=self.total_training_steps,
        )  # fmt: skip
        self.watchdog.register_source(
            "async-rollout", lambda: ray.get(self.host.stacks.remote(), timeout=30)
        )

    def _call(self, method: str, *args: Any) -> Any:
        """``ProducerHost.method(*args)`` in its process, waited for."""
        import ray

        return ray.get(getattr(self.host, method).remote(*args))

    # ------------------------------------------------------------------ the loop's hooks

    def _start_training(self) -> None:
        super()._start_training()
        if self._restored is not None:
            self._call("load_state_dict", self._restored)
            self._restored = None
        self._call("start", self.global_steps)
        self._started = True
        self._feed()

    def _feed(self) -> None:
        """Push the loader batches the producer's throttle lets start (the data order stays
        in this process, so a checkpoint's loader position and buffer agree)."""
        for _ in range(self._call("batches_wanted")):
            self._call("add_batch", next(self._train_batches))

    def _next_step(self) -> dict[str, float]:
        """Take finished groups, score them, update, sync the weights (module docstring)."""
        step, timing = self.global_steps, {}
        metrics: dict[str, float] = {}
        self._remember_step_start()
        with timer("step", timing):
            with self._stage("wait_for_rollouts", timing):
                data, stats = self._take(step)
            isolate_failed(data)
            with self._stage("reward", timing):
                data = self._score(data, self.reward_fn)
            data = self._update(data, step, metrics, timing)
            with self._stage("weight_sync", timing):
                if self.mode == "one_step_off":
                    metrics["async/sync_wait_s"] = self._call("wait_idle")
                self.actor_rollout_wg.sync_rollout_weights()
                self._call("set_version", step)
            self._feed()
        metrics |= take_metrics(stats, timing["wait_for_rollouts"], step - 1)
        metrics |= staleness_metrics(
            data.batch["rollout_versions"], data.batch["response_mask"], step - 1
        )
        return self._step_metrics(data, step, metrics, timing)

    def _take(self, step: int) -> tuple[Any, TakeStats]:
        """Step ``step``'s batch from the producer; each group it finishes meanwhile is
        progress for the watchdog."""
        meta = {"temperature": float(self.config.actor_rollout_ref.rollout.temperature),
                "global_steps": step}
        finished = -1
        while True:
            reply = self._call("take_batch", int(self.config.data.train_batch_size), step - 1,
                               meta, _POLL_S)
            if not isinstance(reply, int):
                return reply
            if reply != finished:
                finished = reply
                self.watchdog.beat("wait_for_rollouts")

    def _stop_training(self) -> None:
        try:
            self._close_producer()
        finally:
            super()._stop_training()

    def _close_producer(self) -> None:
        """Cancel the producer's work in flight and close its engine (once; ``close`` calls
        it too, for a start that failed half-way)."""
        if self._started:
            self._started = False
            self._call("close")

    # ------------------------------------------------------------------ checkpoints

    def _trainer_state(self, step: int) -> dict[str, Any]:
        state = super()._trainer_state(step)
        if self._started:  # with the loader's position it goes with (both pushed from here)
            state["rollout_buffer"] = self._call("state_dict")
        return state

    def _load_trainer_state(self, state: dict[str, Any]) -> None:
        super()._load_trainer_state(state)
        self._restored = state.get("rollout_buffer")

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """The sync trainer's close (Ray too, when it started it), then the servers."""
        try:
            if self.host is not None:
                import ray

                self._close_producer()
                ray.kill(self.host)
                self.host = None
            super().close()
        finally:
            if self._launcher is not None:
                self._launcher.stop()
                self._launcher = None
            if self._threads_before is not None:
                torch.set_num_threads(self._threads_before)
                self._threads_before = None


def _with_rollout(worker_config: DictConfig, rollout: dict[str, Any]) -> DictConfig:
    """``worker_config`` with ``actor_rollout_ref.rollout`` replaced (read-only, like it)."""
    tree = OmegaConf.to_container(worker_config, resolve=True)
    tree["actor_rollout_ref"]["rollout"] = rollout
    copy = OmegaConf.create(tree)
    OmegaConf.set_readonly(copy, True)
    return copy


__all__ = ["AsyncPPOTrainer", "cpu_split", "serve_launcher", "staleness_metrics", "take_metrics"]
