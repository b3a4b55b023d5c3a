"""The trainer section's leaf components' settings: what each reads of `trainer` (and the
teacher of `actor_rollout_ref.teacher`), typed, made once by the trainer's assembly
(ppo_trainer.py, worker_setup.py).

    checkpoints = CheckpointSettings.from_config(cfg.trainer)   # checkpointing, run_checkpoints
    guard = HangGuard(HangGuardSettings.from_config(cfg.trainer))
    monitor = BehaviourMonitor(AlertSettings.from_config(cfg.trainer.alerts))

The components read disjoint keys, so each has its own small object. As in `RolloutConfig`
(agentrl/rollout/engine_config.py), no field has a default (agentrl/config/ppo_trainer.yaml
has them) and a key the section lacks is a `RolloutConfigError` naming it in full
(`trainer.watchdog_action`); a section that is no mapping is a TypeError naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from agentrl.rollout.engine_config import config_section, required


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class CheckpointSettings:
    """Where checkpoints go, which run resumes, what is kept (checkpointing.py)."""

    default_local_dir: str
    resume_mode: str  # auto | disable | resume_path
    resume_from_path: str | None
    save_hf_model_at_end: bool
    max_actor_ckpt_to_keep: int | None
    max_critic_ckpt_to_keep: int | None

    @classmethod
    def from_config(cls, trainer_section: DictConfig | Mapping[str, Any],
                    path: str = "trainer") -> CheckpointSettings:  # fmt: skip
        tree = config_section(trainer_section, path)
        resume_from = required(tree, "resume_from_path", path)
        return cls(
            default_local_dir=str(required(tree, "default_local_dir", path)),
            resume_mode=str(required(tree, "resume_mode", path)),
            resume_from_path=None if resume_from is None else str(resume_from),
            save_hf_model_at_end=bool(required(tree, "save_hf_model_at_end", path)),
            max_actor_ckpt_to_keep=_optional_int(required(tree, "max_actor_ckpt_to_keep", path)),
            max_critic_ckpt_to_keep=_optional_int(
                required(tree, "max_critic_ckpt_to_keep", path)),
        )  # fmt: skip


@dataclass(frozen=True)
class HangGuardSettings:
    """The watchdog's patience and what a hang does (hang_guard.py)."""

    watchdog_s: float | None  # 0 or None: off
    watchdog_action: str  # log | stop

    @classmethod
    def from_config(cls, trainer_section: DictConfig | Mapping[str, Any],
                    path: str = "trainer") -> HangGuardSettings:  # fmt: skip
        tree = config_section(trainer_section, path)
        seconds = required(tree, "watchdog_s", path)
        return cls(watchdog_s=None if seconds is None else float(seconds),
                   watchdog_action=str(required(tree, "watchdog_action", path)))


@dataclass(frozen=True)
class AlertSettings:
    """`trainer.alerts`: the window and each rule's threshold by key (None: rule off)."""

    window: int
    stop_on_alert: bool
    thresholds: Mapping[str, float | None]  # every other key of the section

    @classmethod
    def from_config(cls, alerts: DictConfig | Mapping[str, Any],
                    path: str = "trainer.alerts") -> AlertSettings:  # fmt: skip
        tree = config_section(alerts, path)
        return cls(window=int(required(tree, "window", path)),
                   stop_on_alert=bool(required(tree, "stop_on_alert", path)), thresholds={
                       key: None if value is None else float(value) for key, value in
                       tree.items() if key not in ("window", "stop_on_alert")})  # fmt: skip

    def threshold(self, key: str) -> float | None:
        return self.thresholds.get(key)


@dataclass(frozen=True)
class ValidationSettings:
    """What validation logs and dumps (validation.py)."""

    log_val_generations: int
    validation_data_dir: str | None

    @classmethod
    def from_config(cls, trainer_section: DictConfig | Mapping[str, Any],
                    path: str = "trainer") -> ValidationSettings:  # fmt: skip
        tree = config_section(trainer_section, path)
        dump = required(tree, "validation_data_dir", path)
        return cls(log_val_generations=int(required(tree, "log_val_generations", path)),
                   validation_data_dir=str(dump) if dump else None)


@dataclass(frozen=True)
class TeacherSettings:
    """The teacher behind HTTP (teacher.py): its servers and the tokenizer to check."""

    model_path: str | None
    trust_remote_code: bool
    server_urls: tuple[str, ...]
    request_timeout: float
    max_concurrency: int

    @classmethod
    def from_config(cls, teacher: DictConfig | Mapping[str, Any],
                    path: str = "actor_rollout_ref.teacher") -> TeacherSettings:  # fmt: skip
        tree = config_section(teacher, path)
        model = config_section(required(tree, "model", path), f"{path}.model")
        model_path = required(model, "path", f"{path}.model")
        return cls(
            model_path=None if model_path is None else str(model_path),
            trust_remote_code=bool(required(model, "trust_remote_code", f"{path}.model")),
            server_urls=tuple(str(u) for u in required(tree, "server_urls", path) or ()),
            request_timeout=float(required(tree, "request_timeout", path)),
            max_concurrency=int(required(tree, "max_concurrency", path)),
        )  # fmt: skip


def refuse_raw(value: Any, cls: type, what: str) -> None:
    """A TypeError when a component gets anything but its settings object."""
    if not isinstance(value, cls):
        raise TypeError(f"{what} takes {cls.__name__}.from_config(...) "
                        f"(agentrl/trainer/trainer_settings.py), got {type(value).__name__}")


__all__ = ["AlertSettings", "CheckpointSettings", "HangGuardSettings", "TeacherSettings",
           "ValidationSettings", "refuse_raw"]
