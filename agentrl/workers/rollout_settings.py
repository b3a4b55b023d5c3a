"""RolloutSettings: what a rollout's assembly reads of `actor_rollout_ref`, typed, made once.

    settings = RolloutSettings.from_config(cfg.actor_rollout_ref)
    rollout = build_rollout(settings, tokenizer, loop=LoopThread())      # rollout_assembly.py
    settings.kind, settings.engine.sampling.n, settings.weights_dir, settings.canary.mode

The engine kind (`engine_kind`), the engine's typed `RolloutConfig` (engine_config.py), the
model the rollout serves, the rollout worker's weight-sync and canary keys, and `section`:
`actor_rollout_ref.rollout` resolved once into a plain dict for what reads its own keys of it
(the backend plugin, `registry.py`'s `create(rollout, ...)`; the tool and interaction
loaders; the engine, whose `engine_class` subclasses read `self.config`). It is picklable to
the engine-worker and producer processes. As in `RolloutConfig`, no field has a default and a
key the tree lacks is a `RolloutConfigError` naming it (`actor_rollout_ref.model.path`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from agentrl.rollout.engine_config import ROLLOUT_KEY, RolloutConfig, config_section, required
from agentrl.workers.canary import CanarySettings

ENGINE_KINDS = ("engine", "sharded", "agent")
MODEL_KEY = "actor_rollout_ref.model"


def engine_kind(rollout: Mapping[str, Any]) -> str:
    """`agent` with `agent_function`, `sharded` with `engine_workers > 1`, else `engine`."""
    if rollout["agent_function"]:
        return "agent"
    if int(rollout["engine_workers"]) > 1:
        return "sharded"
    return "engine"


@dataclass(frozen=True)
class ModelSource:
    """`actor_rollout_ref.model`: what the rollout serves and how its tokenizer loads."""

    path: str | None
    trust_remote_code: bool
    custom_chat_template: str | None


@dataclass(frozen=True)
class RolloutSettings:
    """What `build_rollout` and the rollout worker read (see the module docstring)."""

    kind: str  # engine | sharded | agent (`engine_kind`)
    engine: RolloutConfig  # the engine's and the collector's settings
    engine_workers: int  # rollout.engine_workers: the sharded kind's processes
    model: ModelSource
    weights_dir: str | None  # rollout.weights_dir: the disk weight sync's directory
    free_cache_engine: bool  # rollout.free_cache_engine: sleep after generating (GPU)
    verify_weights: str  # rollout.verify_weights: after which syncs servers are checked
    update_weights_bucket_megabytes: int  # rollout.update_weights_bucket_megabytes
    canary: CanarySettings  # rollout.canary*: the check after a weight sync
    section: dict[str, Any]  # actor_rollout_ref.rollout, resolved (read it, do not change it)

    @classmethod
    def from_config(cls, actor_rollout_ref: DictConfig | Mapping[str, Any]) -> RolloutSettings:
        """From the validated `actor_rollout_ref` section (its `rollout` and `model`); a
        missing key raises `RolloutConfigError` naming it in full."""
        actor_rollout_ref = config_section(actor_rollout_ref, "actor_rollout_ref")
        rollout = dict(required(actor_rollout_ref, "rollout", "actor_rollout_ref"))
        model = required(actor_rollout_ref, "model", "actor_rollout_ref")

        def key(name: str) -> Any:
            return required(rollout, name, ROLLOUT_KEY)

        for name in ("agent_function", "engine_workers"):  # engine_kind's keys, named if absent
            key(name)
        weights_dir = key("weights_dir")
        return cls(
            kind=engine_kind(rollout),
            engine=RolloutConfig.from_config(rollout),
            engine_workers=int(key("engine_workers")),
            model=ModelSource(
                path=_optional_str(required(model, "path", MODEL_KEY)),
                trust_remote_code=bool(required(model, "trust_remote_code", MODEL_KEY)),
                custom_chat_template=_optional_str(
                    required(model, "custom_chat_template", MODEL_KEY)),
            ),
            weights_dir=_optional_str(weights_dir),
            free_cache_engine=bool(key("free_cache_engine")),
            verify_weights=str(key("verify_weights")),
            update_weights_bucket_megabytes=int(key("update_weights_bucket_megabytes")),
            canary=CanarySettings.of({name: key(name) for name in CanarySettings.KEYS}),
            section=rollout,
        )  # fmt: skip


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


__all__ = ["ENGINE_KINDS", "ModelSource", "RolloutSettings", "engine_kind"]
