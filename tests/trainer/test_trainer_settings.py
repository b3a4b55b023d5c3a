"""The trainer section's leaf settings: each typed once from the validated tree, a missing key
named in full, a section that is no mapping refused, and each component refusing a raw tree."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agentrl.config import load_config
from agentrl.testing.workers import assert_missing_key_named
from agentrl.trainer import checkpointing as ckpt
from agentrl.trainer.alerts import RULES, BehaviourMonitor
from agentrl.trainer.hang_guard import HangGuard
from agentrl.trainer.run_checkpoints import RunCheckpoints
from agentrl.trainer.teacher import RemoteTeacher
from agentrl.trainer.trainer_settings import (
    AlertSettings,
    CheckpointSettings,
    HangGuardSettings,
    TeacherSettings,
    ValidationSettings,
)
from agentrl.trainer.validation import validate


def _trainer(*overrides: str) -> dict:
    cfg = load_config(overrides=[f"trainer.{o}" for o in overrides])
    return OmegaConf.to_container(cfg.trainer, resolve=True)


def test_the_trainer_section_is_typed_once():
    tree = _trainer("resume_mode=resume_path", "resume_from_path=/ck/global_step_4",
                    "max_actor_ckpt_to_keep=2", "watchdog_s=12", "watchdog_action=stop",
                    "log_val_generations=3", "validation_data_dir=/val",
                    "alerts.window=5", "alerts.entropy_floor=null", "alerts.stop_on_alert=true")
    checkpoint = CheckpointSettings.from_config(OmegaConf.create(tree))
    assert checkpoint == CheckpointSettings(
        default_local_dir=tree["default_local_dir"], resume_mode="resume_path",
        resume_from_path="/ck/global_step_4", save_hf_model_at_end=True,
        max_actor_ckpt_to_keep=2, max_critic_ckpt_to_keep=None)
    assert CheckpointSettings.from_config(tree) == checkpoint  # a mapping reads the same
    assert HangGuardSettings.from_config(tree) == HangGuardSettings(12.0, "stop")
    assert ValidationSettings.from_config(tree) == ValidationSettings(3, "/val")
    alerts = AlertSettings.from_config(tree["alerts"])
    assert (alerts.window, alerts.stop_on_alert) == (5, True)
    assert alerts.threshold("entropy_floor") is None
    assert alerts.threshold("parse_error_rate") == 0.25
    assert {rule.threshold_key for rule in RULES} == set(alerts.thresholds)


def test_the_teacher_section_is_typed_once():
    cfg = load_config(overrides=["algorithm.adv_estimator=on_policy_distill",
                                 "actor_rollout_ref.teacher.server_urls=[http://t:1]",
                                 "actor_rollout_ref.teacher.model.path=/teacher"])
    assert TeacherSettings.from_config(cfg.actor_rollout_ref.teacher) == TeacherSettings(
        model_path="/teacher", trust_remote_code=False, server_urls=("http://t:1",),
        request_timeout=300.0, max_concurrency=32)


@pytest.mark.parametrize(("build", "key"), [
    (CheckpointSettings.from_config, "resume_mode"),
    (CheckpointSettings.from_config, "max_critic_ckpt_to_keep"),
    (HangGuardSettings.from_config, "watchdog_action"),
    (ValidationSettings.from_config, "validation_data_dir"),
])  # fmt: skip
def test_a_missing_trainer_key_is_named_in_full(build, key):
    assert_missing_key_named(build, _trainer(), key, "trainer")


def test_missing_alert_and_teacher_keys_are_named_in_full():
    assert_missing_key_named(AlertSettings.from_config, _trainer()["alerts"], "window",
                             "trainer.alerts")
    teacher = OmegaConf.to_container(load_config().actor_rollout_ref.teacher, resolve=True)
    assert_missing_key_named(TeacherSettings.from_config, teacher, "model.trust_remote_code",
                             "actor_rollout_ref.teacher")


def test_a_section_that_is_no_mapping_is_refused():
    with pytest.raises(TypeError, match="trainer must be a config section"):
        CheckpointSettings.from_config("trainer")  # type: ignore[arg-type]


def test_each_component_refuses_a_raw_tree(tmp_path):
    trainer = load_config().trainer
    for build in (lambda: BehaviourMonitor(trainer.alerts), lambda: HangGuard(trainer),
                  lambda: ckpt.resume_path(trainer),
                  lambda: RunCheckpoints(trainer, None, None, None, None, None),  # type: ignore[arg-type]
                  lambda: RemoteTeacher(load_config().actor_rollout_ref.teacher),
                  lambda: validate(None, [], None, None, trainer, "data_source", 0)):  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"takes \w+Settings\.from_config"):
            build()
