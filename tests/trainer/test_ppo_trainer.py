"""The fit loop end to end on the tiny model: GRPO and PPO steps, validation, checkpoints
and resume, the failed-trajectory rule, and a two-worker Ray run."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from agentrl.config import ConfigError
from agentrl.data import create_rl_dataset, create_train_dataloader
from agentrl.trainer import PPOTrainer, run_train
from agentrl.trainer.checkpointing import CheckpointError
from agentrl.trainer.worker_setup import worker_config

VERL_NAMES = [
    "critic/score/mean", "critic/score/max", "critic/score/min", "critic/rewards/mean",
    "critic/advantages/mean", "critic/returns/mean", "response_length/mean",
    "response_length/max", "response_length/clip_ratio", "prompt_length/mean",
    "actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/lr", "timing_s/gen",
    "timing_s/reward", "timing_s/adv", "timing_s/update_actor",
    "timing_s/step", "perf/throughput", "perf/total_num_tokens", "rollout/requests",
    "rollout/tool_calls",
]  # fmt: skip


def _read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_grpo_fit_two_steps_logs_verl_metrics_dumps_and_checkpoints(make_config, tmp_path):
    cfg = make_config(
        "trainer.total_training_steps=2", f"trainer.rollout_data_dir={tmp_path / 'rollouts'}"
    )
    history = run_train(cfg)

    assert [m["training/global_step"] for m in history] == [1.0, 2.0]
    for m in history:
        assert all(math.isfinite(v) for v in m.values())
        assert set(VERL_NAMES) <= set(m)
        assert m["rollout/requests"] == 4.0 and m["training/failed"] == 0.0
        assert m["rollout/infra_failed"] == 0.0 and m["reward/score_failed"] == 0.0  # every step
        assert m["critic/rewards/mean"] == m["critic/score/mean"]  # no KL in the reward
        assert 1 <= m["response_length/mean"] <= m["response_length/max"] <= 24
        # every token of the batch is a prompt or a response token
        total = 4 * (m["prompt_length/mean"] + m["response_length/mean"])
        assert m["perf/total_num_tokens"] == pytest.approx(total)
        assert m["perf/throughput"] == pytest.approx(total / m["timing_s/step"])
        assert "timing_s/ref" not in m and "timing_s/values" not in m  # GRPO: no ref, no critic
    assert "timing_s/save_checkpoint" in history[1] and "timing_s/save_checkpoint" not in history[0]

    # the rollout dumps: one row per trajectory, with the scores the metrics summarise
    for step, m in enumerate(history, 1):
        rows = _read_jsonl(tmp_path / "rollouts" / f"{step}.jsonl")
        assert [r["uid"] for r in rows] == [f"{step}-0", f"{step}-0", f"{step}-1", f"{step}-1"]
        assert {r["step"] for r in rows} == {step}
        assert np.mean([r["score"] for r in rows]) == pytest.approx(m["critic/score/mean"])
        assert all(r["request_state"] == "completed" for r in rows)
    # the file tracker holds what fit returned
    logged = _read_jsonl(tmp_path / "ckpt" / "metrics.jsonl")
    assert [row.pop("step") for row in logged] == [1, 2]
    assert logged == history
    # save_freq=-1: one checkpoint, after the last step
    root = tmp_path / "ckpt"
    assert sorted(p.name for p in root.glob("global_step_*")) == ["global_step_2"]
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert (root / "global_step_2" / "actor").is_dir()
    state = torch.load(root / "global_step_2" / "data.pt", weights_only=False)
    assert state["global_step"] == 2
    assert state["dataloader"]["epoch"] == 0 and state["dataloader"]["batches_consumed"] == 2


def test_two_trainers_one_after_the_other_in_one_process(make_config, tmp_path):
    """A notebook's second run: each trainer leaves torch.distributed as it found it, so
    the next one starts its own process group, trains, and leaves it too. A worker group
    dropped without shutdown() leaves the group once it is collected."""
    import gc

    import torch.distributed as dist

    from agentrl.distributed import InProcessWorkerGroup, WorkerSpec
    from agentrl.distributed.testing import EchoWorker

    assert not dist.is_initialized()
    for run in range(2):
        cfg = make_config(
            "trainer.total_training_steps=1", f"trainer.default_local_dir={tmp_path / str(run)}"
        )
        (metrics,) = run_train(cfg)
        assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0
        assert not dist.is_initialized(), f"run {run} left its process group"
    InProcessWorkerGroup(WorkerSpec(EchoWorker))  # built, then dropped without shutdown()
    gc.collect()
    assert not dist.is_initialized()


def test_ppo_with_critic_and_kl_in_reward(make_config, tmp_path):
    cfg = make_config(
        "algorithm.adv_estimator=gae",
        "algorithm.use_kl_in_reward=true",
        "trainer.total_training_steps=1",
        "critic.optim.lr=1e-4",
    )
    trainer = PPOTrainer(cfg)
    try:
        assert trainer.use_critic and trainer.use_reference_policy
        (m,) = trainer.fit()
        assert trainer.group.specs["actor_rollout"].kwargs["role"] == "actor_rollout_ref"
    finally:
        trainer.close()
    for key in (
        "critic/vf_loss",
        "critic/vf_clipfrac",
        "critic/grad_norm",
        "critic/values/mean",
        "critic/vf_explained_var",
        "timing_s/values",
        "timing_s/ref",
        "timing_s/update_critic",
        "actor/pg_loss",
        "actor/reward_kl_penalty",
    ):
        assert math.isfinite(m[key]), key
    # step 1: the actor is still the reference, so the KL penalty is 0 and rewards = scores
    assert m["actor/reward_kl_penalty"] == pytest.approx(0.0, abs=1e-6)
    assert m["actor/reward_kl_penalty_coeff"] == 0.001
    assert m["critic/rewards/mean"] == pytest.approx(m["critic/score/mean"], abs=1e-6)
    assert (tmp_path / "ckpt" / "global_step_1" / "critic").is_dir()


def test_critic_warmup_trains_only_the_critic_first(make_config):
    cfg = make_config(
        "algorithm.adv_estimator=gae",
        "trainer.critic_warmup=1",
        "trainer.total_training_steps=2",
        "trainer.save_freq=-1",
    )
    history = run_train(cfg)
    assert not any(k.startswith("actor/") for k in history[0])
    assert "critic/vf_loss" in history[0]
    assert "actor/pg_loss" in history[1] and "critic/vf_loss" in history[1]


def test_validation_before_during_and_only(make_config, trainer_data, tmp_path):
    cfg = make_config(
        f"data.val_files={trainer_data['test']}",
        "trainer.val_before_train=true",
        "trainer.test_freq=1",
        "trainer.total_training_steps=1",
        f"trainer.validation_data_dir={tmp_path / 'val'}",
    )
    history = run_train(cfg)
    logged = _read_jsonl(tmp_path / "ckpt" / "metrics.jsonl")
    assert [row["step"] for row in logged] == [0, 1]  # before training, then after step 1
    key = "val-aux/agentrl/arithmetic/reward/mean@1"  # acc is the core variable
    for row, step in ((logged[0], 0), (logged[1], 1)):
        dumped = _read_jsonl(tmp_path / "val" / f"{step}.jsonl")
        assert len(dumped) == 4  # 4 test prompts, val_kwargs.n = 1
        assert row[key] == pytest.approx(np.mean([r["score"] for r in dumped]))
        assert row["val-core/agentrl/arithmetic/acc/mean@1"] == pytest.approx(
            np.mean([r["acc"] for r in dumped])
        )
    assert history[0][key] == logged[1][key]
    assert logged[1]["val-aux/rollout/requests"] == 4  # the validation rollout's own metrics

    only = PPOTrainer(
        make_config(
            f"data.val_files={trainer_data['test']}",
            "trainer.val_only=true",
            "trainer.val_before_train=true",
        )
    )
    try:
        assert only.fit() == []
        assert key in only.val_metrics
        assert only.global_steps == 1  # resume_mode=auto: it evaluates the latest checkpoint
    finally:
        only.close()


def _actor_weights(trainer):
    return trainer.actor_rollout_wg.full_state_dict("actor")[0]


def _prompts(batch_dict):
    return [json.dumps(list(p)) for p in batch_dict["raw_prompt"]]


def test_resume_continues_with_the_next_batch_and_the_saved_weights(make_config, tmp_path):
    # "killed" after step 2 of 4: a run of 2 steps saving every step
    first = PPOTrainer(
        make_config(
            "trainer.total_training_steps=2",
            "trainer.save_freq=1",
            "trainer.max_actor_ckpt_to_keep=1",
        )
    )
    try:
        first.fit()
        weights_after_2 = _actor_weights(first)
    finally:
        first.close()
    root = tmp_path / "ckpt"
    assert sorted(p.name for p in root.glob("global_step_*")) == ["global_step_2"]  # rotated

    # what an uninterrupted run feeds at step 3: the loader's third batch
    cfg = make_config(
        "trainer.total_training_steps=4",
        "trainer.resume_mode=auto",
        f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
    )
    loader = create_train_dataloader(
        create_rl_dataset(cfg.data.train_files, cfg.data, first.tokenizer), cfg.data
    )
    batches = iter(loader)
    third = [next(batches) for _ in range(3)][-1]

    second = PPOTrainer(cfg)
    try:
        assert second.load_checkpoint() == 2
        resumed = _actor_weights(second)
        assert resumed.keys() == weights_after_2.keys()
        for name, tensor in weights_after_2.items():
            torch.testing.assert_close(resumed[name], tensor, atol=0, rtol=0, msg=name)
        history = second.fit()
    finally:
        second.close()
    assert [m["training/global_step"] for m in history] == [3.0, 4.0]
    rows = _read_jsonl(tmp_path / "rollouts" / "3.jsonl")
    assert [r["uid"] for r in rows] == ["3-0", "3-0", "3-1", "3-1"]
    decoded = [
        second.tokenizer.decode(ids[mask.bool()], skip_special_tokens=True)
        for ids, mask in zip(third["input_ids"], third["attention_mask"], strict=True)
    ]
    assert [r["input"] for r in rows[::2]] == decoded  # the same prompts, in the same order
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "4"


def test_resume_disable_starts_fresh_and_a_bad_path_is_a_clear_error(make_config, tmp_path):
    run_train(make_config("trainer.total_training_steps=1"))
    fresh = PPOTrainer(make_config("trainer.resume_mode=disable"))
    try:
        assert fresh.resume_from is None
        assert fresh.load_checkpoint() == 0
        assert fresh.train_dataloader.batches_consumed == 0
    finally:
        fresh.close()

    with pytest.raises(CheckpointError, match="does not exist"):
        PPOTrainer(
            make_config(
                "trainer.resume_mode=resume_path",
                f"trainer.resume_from_path={tmp_path / 'global_step_9'}",
            )
        )
    with pytest.raises(CheckpointError, match="must be global_step_<N>"):
        PPOTrainer(
            make_config("trainer.resume_mode=resume_path", f"trainer.resume_from_path={tmp_path}")
        )
    # a step directory without its actor checkpoint
    broken = tmp_path / "ckpt" / "global_step_1"
    shutil.rmtree(broken / "actor")
    trainer = PPOTrainer(
        make_config("trainer.resume_mode=resume_path", f"trainer.resume_from_path={broken}")
    )
    try:
        with pytest.raises(CheckpointError, match="incomplete: missing actor"):
            trainer.load_checkpoint()
    finally:
        trainer.close()


def test_config_problems_are_named_before_any_worker_starts(make_config):
    with pytest.raises(ConfigError) as err:
        PPOTrainer(
            make_config(
                "algorithm.adv_estimator=remax",
                "actor_rollout_ref.rollout.val_kwargs.n=2",
                "trainer.worker_group=in_process",
                "trainer.n_gpus_per_node=2",
            )
        )
    assert "val_kwargs.n=1" in str(err.value)
    assert "trainer.worker_group=in_process runs one worker" in str(err.value)


def test_total_training_steps_and_worker_config(make_config):
    cfg = make_config("trainer.total_epochs=2")
    trainer = PPOTrainer(cfg)
    try:
        assert trainer.total_training_steps == 2 * 16  # 32 prompts / 2 per batch, 2 epochs
        wcfg = trainer.worker_config
        assert wcfg.actor_rollout_ref.actor.optim.total_training_steps == 32
        assert wcfg.critic.optim.total_training_steps == 32
        assert cfg.actor_rollout_ref.actor.optim.total_training_steps == -1  # untouched
        assert trainer.worker_group_kind() == "in_process"
    finally:
        trainer.close()
    capped = PPOTrainer(make_config("trainer.total_training_steps=5"))
    capped.close()
    assert capped.total_training_steps == 5
    assert worker_config(cfg, 7).critic.optim.total_training_steps == 7


def test_started_workers_give_the_stages_their_context_and_the_watchdog_the_rollout_loop(
        make_config):
    trainer = PPOTrainer(make_config())
    try:
        assert trainer.context is None  # before the workers start
        trainer.init_workers()
        ctx = trainer.context
        assert ctx.models is trainer.models and ctx.reward_fn is trainer.reward_fn
        assert ctx.trace is trainer.trace and ctx.watchdog is trainer.watchdog
        assert ctx.rollout.n == trainer.config.actor_rollout_ref.rollout.n
        assert ctx.total_training_steps == trainer.total_training_steps
        rollout = trainer.group.worker("actor_rollout").rollout
        assert trainer.watchdog._loops["rollout"] is rollout.event_loop() is rollout.loop.loop
    finally:
        trainer.close()
    assert trainer.context is None


def test_remax_uses_a_greedy_baseline(make_config):
    (m,) = run_train(make_config("algorithm.adv_estimator=remax", "trainer.total_training_steps=1"))
    assert math.isfinite(m["actor/pg_loss"]) and m["timing_s/gen_max"] > 0


@pytest.mark.slow
def test_two_ray_workers_fit_two_steps(make_config):
    pytest.importorskip("ray")
    cfg = make_config(
        "trainer.worker_group=auto",
        "trainer.n_gpus_per_node=2",
        "trainer.total_training_steps=2",
        "ray_init.num_cpus=2",
        "trainer.save_freq=1",
    )
    trainer = PPOTrainer(cfg)
    try:
        assert trainer.worker_group_kind() == "ray"
        history = trainer.fit()
        assert trainer.group.world_size == 2
    finally:
        trainer.close()
    assert [m["training/global_step"] for m in history] == [1.0, 2.0]
    for m in history:
        assert all(math.isfinite(v) for v in m.values())
        assert m["actor/grad_norm"] > 0
        assert m["perf/throughput"] == pytest.approx(
            m["perf/total_num_tokens"] / (2 * m["timing_s/step"])
        )
        # trainer.balance_batch (default on): the 2 ranks' token counts after reordering
        # are never further apart than before, and within one trajectory of each other
        spread = m["global_seqlen/balanced_max"] - m["global_seqlen/balanced_min"]
        assert spread <= m["global_seqlen/minmax_diff"]
        assert spread <= cfg.data.max_prompt_length + cfg.data.max_response_length
    import ray

    assert not ray.is_initialized()  # the trainer shut down the Ray it started
