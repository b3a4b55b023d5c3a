"""The policy step on fake worker groups: which calls, in which order, with
which flags; the advantages of a hand-made GRPO batch."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from agentrl.protocol import DataProto
from agentrl.trainer.policy_step import policy_step, rewards_and_advantages
from agentrl.trainer.step_context import Models, StepContext
from agentrl.trainer.tracing import StepTrace


def _config(fuse=False, **trainer):
    return OmegaConf.create({
        "trainer": {"balance_batch": False, "critic_warmup": 0, **trainer},
        "actor_rollout_ref": {"rollout": {"n": 2},
                              "actor": {"ppo_epochs": 1, "fuse_old_log_prob": fuse,
                                        "segment_weighting": "token", "ppo_mini_batch_size": 2}},
        "critic": {"ppo_mini_batch_size": 2}, "data": {},
        "algorithm": {"adv_estimator": "grpo", "gamma": 1.0, "lam": 1.0, "kl_penalty": "kl",
                      "norm_adv_by_std_in_grpo": True},
    })  # fmt: skip


def _batch():
    scores = torch.zeros(4, 3)
    scores[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0])
    return DataProto.from_dict(
        tensors={"token_level_scores": scores, "response_mask": torch.ones(4, 3),
                 "rollout_log_probs": torch.zeros(4, 3)},
        non_tensors={"uid": ["a", "a", "b", "b"]},
    )  # fmt: skip


class _Worker:
    def __init__(self, calls, name):
        self.calls, self.name = calls, name

    def _out(self, key, data):
        return DataProto.from_dict(tensors={key: torch.zeros(len(data), 3)})

    def compute_log_prob(self, data):
        self.calls.append(f"{self.name}.old_log_prob")
        return self._out("old_log_probs", data)

    def compute_ref_log_prob(self, data):
        self.calls.append(f"{self.name}.ref")
        return self._out("ref_log_prob", data)

    def compute_values(self, data):
        self.calls.append(f"{self.name}.values")
        return self._out("values", data)

    def update_critic(self, data):
        self.calls.append(f"{self.name}.update_critic")
        return DataProto(meta_info={"metrics": {"critic/vf_loss": 0.5}})

    def update_actor(self, data):
        self.calls.append(f"{self.name}.update_actor sync={data.meta_info['sync_weights']}")
        assert "advantages" in data.batch.keys()
        if data.meta_info["fuse_old_log_prob"]:  # the update makes them (PPOActor)
            assert "old_log_probs" not in data.batch.keys()
            return DataProto.from_dict(tensors={"old_log_probs": torch.full((len(data), 3), -0.5)},
                                       meta_info={"metrics": {"actor/pg_loss": 0.25}})  # fmt: skip
        return DataProto(meta_info={"metrics": {"actor/pg_loss": 0.25}})


def _run(config, models, step=1, sync=True, kl_ctrl=None):
    stages = []

    @contextlib.contextmanager
    def stage(name, timing):
        stages.append(name)
        timing[name] = 0.0
        yield

    metrics, timing = {}, {}
    ctx = StepContext.of(config, models, reward_fn=None, kl_ctrl=kl_ctrl,
                         trace=StepTrace(False, Path("unused")), watchdog=None, stage=stage,
                         n_workers=1, total_training_steps=3)  # fmt: skip
    data = policy_step(_batch(), step, ctx, sync_weights=sync, metrics=metrics, timing=timing)
    return data, stages, metrics


def test_grpo_stages_in_order_and_the_actor_syncs_when_told():
    calls = []
    data, stages, metrics = _run(_config(), Models(_Worker(calls, "actor")))
    assert stages == ["old_log_prob", "adv", "update_actor"]
    assert calls == ["actor.old_log_prob", "actor.update_actor sync=True"]
    assert metrics["actor/pg_loss"] == 0.25
    # group a: rewards 1, 0 -> advantages +-0.707; group b: 1, 1 -> 0
    adv = data.batch["advantages"][:, 0].tolist()
    assert adv[0] == pytest.approx(-adv[1]) and adv[0] > 0 and adv[2:] == [0.0, 0.0]
    _run(_config(), Models(_Worker(calls := [], "actor")), sync=False)
    assert calls[-1] == "actor.update_actor sync=False"  # the off-policy trainer's


def test_reference_critic_and_warmup():
    calls = []
    models = Models(_Worker(calls, "actor"), critic=_Worker(calls, "critic"),
                    use_reference_policy=True)  # fmt: skip
    config = _config(critic_warmup=1)
    config.algorithm.adv_estimator = "gae"
    _, stages, metrics = _run(config, models, step=1)
    assert stages == ["old_log_prob", "ref", "values", "adv", "update_critic"]
    assert "actor.update_actor sync=True" not in calls  # step 1 <= critic_warmup
    assert metrics["critic/vf_loss"] == 0.5
    _, stages, _ = _run(config, models, step=2)
    assert stages[-1] == "update_actor"


def test_rewards_and_advantages_without_kl_takes_the_scores_as_rewards():
    data = _batch()
    assert rewards_and_advantages(data, _config().algorithm, n=2) == {}
    torch.testing.assert_close(data.batch["token_level_rewards"], data.batch["token_level_scores"])
    assert data.batch["advantages"].shape == (4, 3)


def test_fused_old_log_probs_come_back_from_the_update():
    calls = []
    data, stages, metrics = _run(_config(fuse=True), Models(_Worker(calls, "actor")))
    assert stages == ["adv", "update_actor"] and calls == ["actor.update_actor sync=True"]
    assert torch.equal(data.batch["old_log_probs"], torch.full((4, 3), -0.5))
    assert metrics["training/rollout_log_probs_diff_mean"] == pytest.approx(0.5)  # from them
    # something reads them before the update: the separate pass
    config = _config(fuse=True, critic_warmup=1)
    assert _run(config, Models(_Worker([], "actor")), step=1)[1][0] == "old_log_prob"
    unfused = _config(fuse=True)
    unfused.actor_rollout_ref.actor.ppo_epochs = 2
    assert _run(unfused, Models(_Worker([], "actor")))[1][0] == "old_log_prob"
    calls = []
    models = Models(_Worker(calls, "actor"), use_teacher=True, remote_teacher=_Worker([], "t"))
    with pytest.raises(AttributeError, match="compute_teacher_log_prob"):  # a fake teacher
        _run(_config(fuse=True), models)
    assert calls == ["actor.old_log_prob"]  # distillation reads them: the separate pass
