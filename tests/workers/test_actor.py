"""ActorRolloutRefWorker: log-probs, PPO update, reference, weight sync; in process and on Ray.

The Ray test is the issue's acceptance check: two Ray CPU workers with FSDP2 over gloo run
compute_log_prob and update_actor on the tiny model; the log-probs match a single-process
reference, the in-process group gives the same numbers, and after the update the rollout's
greedy output is the actor's greedy output.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl.distributed import (
    InProcessWorkerGroup,
    RayWorkerGroup,
    ResourcePool,
    WorkerError,
    WorkerSpec,
)
from agentrl.protocol import DataProto
from agentrl.testing.workers import (
    greedy_continuations,
    make_trajectory_batch,
    reference_log_probs,
    response_tokens,
    tiny_worker_config,
)
from agentrl.workers import ActorRolloutRefWorker

P, R = 32, 16
SIZES = [f"data.max_prompt_length={P}", f"data.max_response_length={R}"]


def _group(model_dir, role="actor_rollout_ref", overrides=()):
    cfg = tiny_worker_config(model_dir, [*SIZES, *overrides])
    group = InProcessWorkerGroup(
        WorkerSpec(ActorRolloutRefWorker, cfg.actor_rollout_ref, role=role, seed=0)
    )
    group.init_model()
    return group


def _batch(tokenizer, n=8, seed=0) -> DataProto:
    return make_trajectory_batch(n, P, R, vocab_size=len(tokenizer), seed=seed)


def _prompts() -> DataProto:
    messages = [
        [{"role": "user", "content": text}]
        for text in ("what is 2+3?", "hello there", "the of and to in", "name a tool")
    ]
    return DataProto.from_dict(non_tensors={"raw_prompt": messages}, meta_info={"validate": True})


def test_log_probs_match_a_single_process_reference_and_ref_stays_initial(
    tiny_model_dir, tiny_tokenizer
):
    data = _batch(tiny_tokenizer)
    reference = reference_log_probs(AutoModelForCausalLM.from_pretrained(tiny_model_dir), data)
    overrides = [
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    ]
    with _group(tiny_model_dir, overrides=overrides) as group:
        out = group.compute_log_prob(data)
        assert sorted(out.batch.keys()) == ["old_log_probs"]  # no entropy unless asked
        torch.testing.assert_close(out.batch["old_log_probs"], reference, atol=1e-5, rtol=0)
        data.meta_info["calculate_entropy"] = True
        with_entropy = group.compute_log_prob(data)
        del data.meta_info["calculate_entropy"]
        assert sorted(with_entropy.batch.keys()) == ["entropys", "old_log_probs"]
        assert (with_entropy.batch["entropys"] > 0).any()
        torch.testing.assert_close(with_entropy.batch["old_log_probs"], reference, atol=1e-5, rtol=0)
        data = data.union(out)
        ref = group.compute_ref_log_prob(data)
        torch.testing.assert_close(ref.batch["ref_log_prob"], reference, atol=1e-5, rtol=0)
        metrics = group.update_actor(data.union(ref)).meta_info["metrics"]
        assert metrics["actor/pg_clipfrac"] == 0.0 and metrics["actor/lr"] == 1e-3  # on-policy
        assert metrics["actor/grad_norm"] > 0 and "timing/weight_sync_s" in metrics
        assert 0.05 < metrics["perf/peak_rss_gb"] < 24  # the worker process's, this step
        assert "perf/max_memory_allocated_gb" not in metrics  # no GPU here
        after = group.compute_log_prob(data).batch["old_log_probs"]
        assert (after - reference).abs().max() > 1e-2  # the actor moved
        torch.testing.assert_close(
            group.compute_ref_log_prob(data).batch["ref_log_prob"], reference, atol=1e-5, rtol=0
        )  # the reference did not


def test_weight_sync_makes_the_rollout_generate_what_the_actor_would(varied_model_dir):
    overrides = [
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "data.train_batch_size=4",
    ]
    with _group(varied_model_dir, role="actor_rollout", overrides=overrides) as group:
        policy = AutoModelForCausalLM.from_pretrained(varied_model_dir)
        before = group.generate_sequences(_prompts())
        greedy_before = greedy_continuations(policy, before, R)
        tokens_before = response_tokens(before)
        assert all(
            len(t) > 1 and t == g[: len(t)]
            for t, g in zip(tokens_before, greedy_before, strict=True)
        )
        # the engine's log-probs are the actor's log-probs for the same weights
        old = group.compute_log_prob(before).batch["old_log_probs"]
        mask = before.batch["response_mask"].bool()
        torch.testing.assert_close(
            old[mask], before.batch["rollout_log_probs"][mask], atol=1e-4, rtol=0
        )

        data = before.select(
            batch_keys=[
                "prompts",
                "responses",
                "input_ids",
                "attention_mask",
                "position_ids",
                "response_mask",
            ],
            deepcopy=True,
        )
        data.batch["advantages"] = torch.linspace(-1, 1, len(data))[:, None] * mask
        data.batch["old_log_probs"] = old
        group.update_actor(data)  # syncs the rollout
        after = group.generate_sequences(_prompts())
        policy.load_state_dict(group.full_state_dict()[0])
        tokens_after = response_tokens(after)
        assert tokens_after != tokens_before  # the update changed the greedy outputs ...
        assert all(
            t == g[: len(t)]
            for t, g in zip(  # ... exactly as it changed the actor's
                tokens_after, greedy_continuations(policy, after, R), strict=True
            )
        )


def test_roles_hold_only_their_parts(tiny_model_dir, tiny_tokenizer):
    data = _batch(tiny_tokenizer, n=4)
    with _group(tiny_model_dir, role="ref") as group:
        torch.testing.assert_close(
            group.compute_ref_log_prob(data).batch["ref_log_prob"],
            reference_log_probs(AutoModelForCausalLM.from_pretrained(tiny_model_dir), data),
            atol=1e-5,
            rtol=0,
        )
        with pytest.raises(WorkerError, match="the actor is not available in role 'ref'"):
            group.compute_log_prob(data)
    with _group(tiny_model_dir, role="actor") as group:
        with pytest.raises(WorkerError, match="the rollout is not available in role 'actor'"):
            group.generate_sequences(_prompts())
        with pytest.raises(
            WorkerError, match="update_actor needs data.batch keys \\['old_log_probs'\\]"
        ):
            group.update_actor(data)
    with pytest.raises(WorkerError, match="unknown role 'critic'; valid: actor, rollout"):
        InProcessWorkerGroup(WorkerSpec(ActorRolloutRefWorker, {}, role="critic"))


def test_kl_loss_and_learning_rate_warmup_reach_the_metrics(tiny_model_dir, tiny_tokenizer):
    overrides = [
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    ]
    with _group(tiny_model_dir, role="actor_rollout_ref", overrides=overrides) as group:
        data = _batch(tiny_tokenizer)
        data = data.union(group.compute_log_prob(data)).union(group.compute_ref_log_prob(data))
        lrs, kl = [], []
        for _ in range(3):
            metrics = group.update_actor(data).meta_info["metrics"]
            lrs.append(metrics["actor/lr"])
            kl.append(metrics["actor/kl_loss"])
        assert lrs == [5e-4, 1e-3, 1e-3]  # warmup 2: half the lr at the first step, not 0
        assert kl[0] == pytest.approx(0.0, abs=1e-7)  # the first update starts at the ref
        assert kl[1] > 0  # the first step learned: the actor has left the reference


def test_gradient_checkpointing_gives_the_same_update(tiny_model_dir, tiny_tokenizer):
    data = _batch(tiny_tokenizer)
    results = []
    for enabled in ("false", "true"):
        overrides = [f"actor_rollout_ref.model.enable_gradient_checkpointing={enabled}"]
        with _group(tiny_model_dir, role="actor", overrides=overrides) as group:
            batch = data.select(deepcopy=True).union(group.compute_log_prob(data))
            metrics = group.update_actor(batch).meta_info["metrics"]
            results.append(
                (metrics["actor/grad_norm"], group.compute_log_prob(data).batch["old_log_probs"])
            )
    (norm, after), (norm_ckpt, after_ckpt) = results
    assert norm_ckpt == pytest.approx(norm, rel=1e-5)
    torch.testing.assert_close(after_ckpt, after, atol=1e-5, rtol=0)


# ------------------------------------------------------------------ two Ray workers


@pytest.mark.slow
def test_two_ray_workers_with_fsdp2_match_one_process(ray_cluster, tiny_model_dir, tiny_tokenizer):
    data = _batch(tiny_tokenizer, n=8, seed=4)
    # one mini-batch per epoch: the optimizer steps see the same rows in both layouts
    # (with several, data parallelism would put other rows together in each mini-batch)
    common = [
        *SIZES,
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.optim.lr=1e-4",
    ]
    # one process, micro-batches by count
    with _group(
        tiny_model_dir,
        overrides=[*common, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"],
    ) as single:
        single_old = single.compute_log_prob(data)
        single_metrics = single.update_actor(
            data.select(deepcopy=True).union(single_old)
        ).meta_info["metrics"]
        single_after = single.compute_log_prob(data).batch["old_log_probs"]
    reference = reference_log_probs(AutoModelForCausalLM.from_pretrained(tiny_model_dir), data)

    # two Ray processes, FSDP2 over gloo, micro-batches by token budget
    cfg = tiny_worker_config(
        tiny_model_dir,
        [
            *common,
            "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
            f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={2 * (P + R)}",
        ],
    )
    pool = ResourcePool([2])
    group = RayWorkerGroup(
        pool,
        WorkerSpec(ActorRolloutRefWorker, cfg.actor_rollout_ref, role="actor_rollout_ref"),
        dist_timeout_s=120,
        error_grace_s=10,
    )
    try:
        group.init_model()
        old = group.compute_log_prob(data)
        torch.testing.assert_close(old.batch["old_log_probs"], reference, atol=1e-5, rtol=0)
        torch.testing.assert_close(
            old.batch["old_log_probs"], single_old.batch["old_log_probs"], atol=1e-5, rtol=0
        )
        metrics = group.update_actor(data.select(deepcopy=True).union(old)).meta_info["metrics"]
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "actor/entropy"):
            assert metrics[key] == pytest.approx(single_metrics[key], rel=1e-4, abs=1e-6), key
        after = group.compute_log_prob(data).batch["old_log_probs"]
        assert (after - reference).abs().max() > 0.1  # the update moved the actor ...
        torch.testing.assert_close(after, single_after, atol=1e-5, rtol=0)  # ... identically
        torch.testing.assert_close(
            group.compute_ref_log_prob(data).batch["ref_log_prob"], reference, atol=1e-5, rtol=0
        )

        # weight sync on both ranks: each generates its half of the prompts greedily, with
        # the updated weights (the engine's log-probs are the actor's)
        rollout = group.generate_sequences(_prompts())
        policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        policy.load_state_dict(group.full_state_dict()[1])
        assert all(
            t == g[: len(t)]
            for t, g in zip(
                response_tokens(rollout), greedy_continuations(policy, rollout, R), strict=True
            )
        )
        mask = rollout.batch["response_mask"].bool()
        actor_log_probs = group.compute_log_prob(rollout).batch["old_log_probs"]
        torch.testing.assert_close(
            rollout.batch["rollout_log_probs"][mask], actor_log_probs[mask], atol=1e-4, rtol=0
        )

        # a bad batch fails on both ranks with their tracebacks, and the group lives on
        with pytest.raises(WorkerError) as caught:
            group.update_actor(data)
        assert caught.value.ranks == [0, 1] and not caught.value.stopped
        assert "update_actor needs data.batch keys ['old_log_probs']" in str(caught.value)
        assert "ppo_actor.py" in str(caught.value)  # the worker-side traceback
        assert len(group.compute_log_prob(data)) == 8
    finally:
        group.shutdown()
        pool.remove()


def test_the_teacher_scores_the_students_tokens_and_stays_frozen(tiny_model_dir,
                                                                  varied_model_dir,
                                                                  tiny_tokenizer):
    data = _batch(tiny_tokenizer)
    teacher_ref = reference_log_probs(AutoModelForCausalLM.from_pretrained(varied_model_dir),
                                      data)
    overrides = [f"actor_rollout_ref.teacher.model.path={varied_model_dir}",
                 "algorithm.adv_estimator=on_policy_distill",
                 "actor_rollout_ref.teacher.log_prob_micro_batch_size_per_gpu=3",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    with _group(tiny_model_dir, role="actor_rollout", overrides=overrides) as group:
        out = group.compute_teacher_log_prob(data)
        assert sorted(out.batch.keys()) == ["teacher_log_prob"]
        torch.testing.assert_close(out.batch["teacher_log_prob"], teacher_ref, atol=1e-5, rtol=0)
        data = data.union(group.compute_log_prob(data)).union(out)
        data.batch["advantages"] = data.batch["teacher_log_prob"] - data.batch["old_log_probs"]
        group.update_actor(data)
        torch.testing.assert_close(group.compute_teacher_log_prob(data).batch["teacher_log_prob"],
                                   teacher_ref, atol=1e-5, rtol=0)  # the teacher did not move

