"""Checkpoints: a resumed actor continues exactly; the HF export is the actor's weights."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl.distributed import InProcessWorkerGroup, WorkerError, WorkerSpec
from agentrl.testing.workers import (
    make_trajectory_batch,
    reference_log_probs,
    tiny_worker_config,
)
from agentrl.workers import ActorRolloutRefWorker
from agentrl.workers.checkpoint import rng_state, set_rng_state

P, R = 12, 16


def _group(model_dir, contents="[model,optimizer,extra,hf_model]"):
    cfg = tiny_worker_config(
        model_dir,
        [
            f"data.max_prompt_length={P}",
            f"data.max_response_length={R}",
            "actor_rollout_ref.actor.optim.lr_warmup_steps=4",
            f"actor_rollout_ref.actor.checkpoint.save_contents={contents}",
        ],
    )
    group = InProcessWorkerGroup(
        WorkerSpec(ActorRolloutRefWorker, cfg.actor_rollout_ref, role="actor")
    )
    group.init_model()
    return group


def _step(group, data):
    batch = data.select(deepcopy=True)
    batch = batch.union(group.compute_log_prob(batch))
    return group.update_actor(batch).meta_info["metrics"]


def test_resume_continues_exactly_and_exports_hf_weights(tmp_path, tiny_model_dir, tiny_tokenizer):
    data = make_trajectory_batch(8, P, R, vocab_size=len(tiny_tokenizer), seed=2)
    with _group(tiny_model_dir) as group:
        _step(group, data)
        _step(group, data)
        saved = group.compute_log_prob(data).batch["old_log_probs"]
        assert group.save_checkpoint(str(tmp_path / "ckpt")) == [str(tmp_path / "ckpt")]
        expected_metrics = _step(group, data)
        expected = group.compute_log_prob(data).batch["old_log_probs"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "dcp",
        "extra_rank0.pt",
        "huggingface",
    ]

    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "huggingface")
    torch.testing.assert_close(reference_log_probs(exported, data), saved, atol=1e-5, rtol=0)
    assert (tmp_path / "ckpt" / "huggingface" / "tokenizer_config.json").is_file()

    with _group(tiny_model_dir) as resumed:
        assert resumed.load_checkpoint(str(tmp_path / "ckpt")) == [2]
        torch.testing.assert_close(
            resumed.compute_log_prob(data).batch["old_log_probs"], saved, atol=0, rtol=0
        )
        metrics = _step(resumed, data)
        assert metrics["actor/lr"] == expected_metrics["actor/lr"] == pytest.approx(3 / 4 * 1e-3)  # mid-warmup
        assert metrics["actor/pg_loss"] == pytest.approx(
            expected_metrics["actor/pg_loss"], abs=1e-7
        )
        # the optimizer's moments were restored too: the next step lands on the same weights
        torch.testing.assert_close(
            resumed.compute_log_prob(data).batch["old_log_probs"], expected, atol=1e-6, rtol=0
        )


def test_model_only_checkpoint_and_missing_parts(tmp_path, tiny_model_dir, tiny_tokenizer):
    data = make_trajectory_batch(4, P, R, vocab_size=len(tiny_tokenizer), seed=3)
    with _group(tiny_model_dir, contents="[model]") as group:
        _step(group, data)
        group.save_checkpoint(str(tmp_path / "model_only"))
        saved = group.compute_log_prob(data).batch["old_log_probs"]
    assert sorted(p.name for p in (tmp_path / "model_only").iterdir()) == ["dcp"]
    with _group(tiny_model_dir, contents="[model]") as resumed:
        resumed.load_checkpoint(str(tmp_path / "model_only"))
        torch.testing.assert_close(
            resumed.compute_log_prob(data).batch["old_log_probs"], saved, atol=0, rtol=0
        )
    with _group(tiny_model_dir) as other:
        with pytest.raises(WorkerError, match="holds no optimizer state; load only what it has"):
            other.load_checkpoint(str(tmp_path / "model_only"))
        with pytest.raises(WorkerError, match="does not exist"):
            other.load_checkpoint(str(tmp_path / "nowhere"))


def test_rng_state_round_trip():
    state = rng_state()
    first = (torch.rand(3), __import__("random").random(), __import__("numpy").random.rand())
    set_rng_state(state)
    second = (torch.rand(3), __import__("random").random(), __import__("numpy").random.rand())
    assert torch.equal(first[0], second[0]) and first[1:] == second[1:]
