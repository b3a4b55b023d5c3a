"""CriticWorker: values from a one-label token classifier and clipped value-loss updates."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForTokenClassification

from agentrl.algos import compute_value_loss
from agentrl.distributed import InProcessWorkerGroup, WorkerError, WorkerSpec
from agentrl.testing.workers import (
    batch_from_rows,
    grpo_group_rows,
    make_trajectory_batch,
    tiny_worker_config,
)
from agentrl.workers import CriticWorker

P, R = 12, 16


def _group(model_dir, overrides=()):
    cfg = tiny_worker_config(
        model_dir,
        [
            f"data.max_prompt_length={P}",
            f"data.max_response_length={R}",
            "critic.optim.lr=1e-3",
            "critic.ppo_mini_batch_size=8",
            *overrides,
        ],
    )
    group = InProcessWorkerGroup(WorkerSpec(CriticWorker, cfg.critic, seed=0))
    group.init_model()
    return group


def test_values_are_the_value_model_outputs_on_the_response(tiny_model_dir, tiny_tokenizer):
    data = make_trajectory_batch(6, P, R, vocab_size=len(tiny_tokenizer), seed=5)
    torch.manual_seed(0)  # the worker seeds the fresh head the same way
    reference = AutoModelForTokenClassification.from_pretrained(tiny_model_dir, num_labels=1)
    batch = data.batch
    with torch.no_grad():
        expected = reference(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits[:, P - 1 : -1, 0]
    expected = expected * batch["response_mask"]
    # critic.model.path is null: the value model starts from the policy's weights
    with _group(tiny_model_dir, ["critic.forward_micro_batch_size_per_gpu=4"]) as group:
        values = group.compute_values(data).batch["values"]
    assert values.shape == (6, R)
    torch.testing.assert_close(values, expected, atol=1e-5, rtol=0)


def test_update_critic_fits_the_returns_with_clipping(tiny_model_dir, tiny_tokenizer):
    data = make_trajectory_batch(8, P, R, vocab_size=len(tiny_tokenizer), seed=6)
    mask = data.batch["response_mask"]
    data.batch["returns"] = torch.full((8, R), 0.5) * mask
    overrides = ["critic.cliprange_value=0.05", "critic.ppo_micro_batch_size_per_gpu=4"]
    with _group(tiny_model_dir, overrides) as group:
        values = group.compute_values(data).batch["values"]
        data.batch["values"] = values
        first_loss, _ = compute_value_loss(values, data.batch["returns"], values, mask, 0.05)
        losses, clipfracs = [], []
        for _ in range(4):
            metrics = group.update_critic(data).meta_info["metrics"]
            losses.append(metrics["critic/vf_loss"])
            clipfracs.append(metrics["critic/vf_clipfrac"])
        assert set(metrics) == {
            "critic/vf_loss",
            "critic/vf_clipfrac",
            "critic/vpred_mean",
            "critic/grad_norm",
            "critic/lr",
            "timing/update_critic_s",
        }
        assert losses[0] == pytest.approx(first_loss.item(), abs=1e-5)
        assert clipfracs[0] == 0.0 and clipfracs[-1] > 0  # the predictions left the clip range
        new_values = group.compute_values(data).batch["values"]
        error_before = ((values - 0.5).abs() * mask).sum()
        error_after = ((new_values - 0.5).abs() * mask).sum()
        assert error_after < error_before
        with pytest.raises(
            WorkerError, match="update_critic needs data.batch keys \\['returns'\\]"
        ):
            group.update_critic(
                data.select(
                    batch_keys=[
                        "input_ids",
                        "attention_mask",
                        "position_ids",
                        "responses",
                        "response_mask",
                        "values",
                    ]
                )
            )


def test_shared_prefixes_give_the_flat_values_and_update_under_fsdp2(tiny_model_dir,
                                                                   tiny_tokenizer):  # fmt: skip
    """Two GRPO groups of 4 through the worker (the model sharded with FSDP2, several
    forwards before one backward): the values and two updates' metrics equal the flat ones."""
    v = len(tiny_tokenizer)
    data = batch_from_rows(grpo_group_rows(4, 44, 6, v, seed=7) + grpo_group_rows(4, 40, 8, v,
                                                                                  seed=8))  # fmt: skip
    data.batch["returns"] = 0.5 * data.batch["response_mask"]
    results = []
    for shared in ("true", "false"):
        overrides = [f"actor_rollout_ref.actor.shared_prefix={shared}",
                     "critic.ppo_micro_batch_size_per_gpu=4", "critic.optim.lr=1e-2"]
        with _group(tiny_model_dir, overrides) as group:
            passes: list[int] = []
            model = group.worker().model
            model.base_model.register_forward_pre_hook(lambda *_, p=passes: p.append(1))
            step = data.select(deepcopy=True)
            step.batch["values"] = group.compute_values(step).batch["values"]
            assert len(passes) == (2 * 2 if shared == "true" else 2)  # 2 micro-batches
            metrics = [group.update_critic(step).meta_info["metrics"] for _ in range(2)]
            results.append((step.batch["values"], metrics))
    (values, metrics), (flat_values, flat_metrics) = results
    torch.testing.assert_close(values, flat_values, atol=2e-5, rtol=0)
    for got, want in zip(metrics, flat_metrics, strict=True):
        for key in ("critic/vf_loss", "critic/grad_norm", "critic/vpred_mean"):
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
