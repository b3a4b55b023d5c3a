"""RemoteTeacher: the teacher behind SGLang's HTTP API (here `agentrl serve`, which answers
input log-probs as SGLang does) gives the log-probs a single-process forward of the teacher
gives; a teacher with another tokenizer is refused; and distillation trains with it."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.serve import create_app
from agentrl.testing.workers import make_trajectory_batch, reference_log_probs
from agentrl.trainer.teacher import RemoteTeacher
from agentrl.trainer.trainer_settings import TeacherSettings
from agentrl.utils.serving import serve_in_thread


def _teacher_cfg(model_dir, url):
    from omegaconf import OmegaConf

    return TeacherSettings.from_config(OmegaConf.create(
        {"model": {"path": str(model_dir), "trust_remote_code": False}, "server_urls": [url],
         "request_timeout": 60, "max_concurrency": 3}))


def test_the_servers_log_probs_are_the_teachers(varied_model_dir, tiny_tokenizer):
    data = make_trajectory_batch(6, 24, 12, vocab_size=len(tiny_tokenizer), seed=3)
    expected = reference_log_probs(AutoModelForCausalLM.from_pretrained(varied_model_dir), data)
    backend = HFBackend.from_pretrained(str(varied_model_dir), tiny_tokenizer)
    with serve_in_thread(create_app(backend, model_path=str(varied_model_dir))) as url:
        teacher = RemoteTeacher(_teacher_cfg(varied_model_dir, url), tiny_tokenizer)
        try:
            got = teacher.compute_teacher_log_prob(data).batch["teacher_log_prob"]
        finally:
            teacher.close()
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_distillation_from_a_served_teacher(make_config, varied_model_dir, tiny_tokenizer):
    from agentrl.trainer import PPOTrainer

    backend = HFBackend.from_pretrained(str(varied_model_dir), tiny_tokenizer)
    with serve_in_thread(create_app(backend, model_path=str(varied_model_dir))) as url:
        cfg = make_config("algorithm.adv_estimator=on_policy_distill",
                          f"actor_rollout_ref.teacher.model.path={varied_model_dir}",
                          f"actor_rollout_ref.teacher.server_urls=[{url}]",
                          "actor_rollout_ref.rollout.multi_turn.enable=false",
                          "trainer.total_training_steps=2")
        trainer = PPOTrainer(cfg)
        try:
            history = trainer.fit()
        finally:
            trainer.close()
    for m in history:
        assert math.isfinite(m["distill/reverse_kl"]) and m["distill/teacher_logprob"] < 0
        assert m["actor/pg_loss"] == pytest.approx(m["distill/reverse_kl"], abs=1e-4)
