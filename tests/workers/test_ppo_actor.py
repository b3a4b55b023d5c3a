"""PPOActor on a plain (unsharded) tiny model: log-probs, the PPO update and its metrics."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode
from transformers import AutoModelForCausalLM

from agentrl.algos import agg_loss, kl_penalty
from agentrl.testing.workers import (
    batch_from_rows,
    grpo_group_rows,
    make_trajectory_batch,
    tiny_worker_config,
)
from agentrl.workers.actor_settings import ActorSettings
from agentrl.workers.micro_batch import MicroBatching
from agentrl.workers.ppo_actor import PPOActor, micro_batched_forward

P, R = 12, 20


@pytest.fixture(scope="module")
def batch(tiny_tokenizer):
    return make_trajectory_batch(8, P, R, vocab_size=len(tiny_tokenizer), seed=1)


def _actor(model_dir, overrides=(), mini=8, micro=None):
    cfg = tiny_worker_config(
        model_dir, ["actor_rollout_ref.actor.ppo_mini_batch_size=8", *overrides]
    ).actor_rollout_ref.actor
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return PPOActor(model, optimizer, ActorSettings.from_config(cfg), mini_batch_size=mini,
                    micro_batch_size=micro)


def test_log_probs_do_not_depend_on_the_micro_batching(tiny_model_dir, batch):
    actor = _actor(tiny_model_dir)
    whole, entropy = actor.compute_log_prob(batch, MicroBatching())
    by_two, _ = actor.compute_log_prob(batch, MicroBatching(micro_batch_size=2))
    by_tokens, none = actor.compute_log_prob(
        batch, MicroBatching(use_dynamic_bsz=True, max_token_len=70), calc_entropy=False
    )
    assert whole.shape == entropy.shape == (8, R) and none is None
    torch.testing.assert_close(by_two, whole, atol=1e-5, rtol=0)
    torch.testing.assert_close(by_tokens, whole, atol=1e-5, rtol=0)
    assert (entropy[batch.batch["attention_mask"][:, P:].bool()] > 0).all()


class _HostCopies(TorchFunctionMode):
    """Counts ``Tensor.cpu`` calls (on a GPU, each is a host sync)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += func is torch.Tensor.cpu
        return func(*args, **(kwargs or {}))


def test_a_log_prob_pass_reads_its_results_to_the_host_once_not_per_micro_batch(batch):
    model = torch.nn.Linear(1, 1)  # the device comes from its parameters

    def forward(model, micro):  # two (b, R) outputs that name their rows
        ids = micro["input_ids"][:, -R:].float()
        return ids, ids * 2

    expected = batch.batch["input_ids"][:, -R:].float()
    calls = {}
    for batching in (MicroBatching(), MicroBatching(micro_batch_size=2),
                     MicroBatching(micro_batch_size=1),
                     MicroBatching(use_dynamic_bsz=True, max_token_len=70)):  # fmt: skip
        with _HostCopies() as copies:
            first, second = micro_batched_forward(model, batch, batching, forward)
        calls[batching] = copies.calls
        assert first.device.type == "cpu" and torch.equal(first, expected)  # rows in order
        assert torch.equal(second, 2 * expected)
    # 1 to 8 micro-batches: one copy per output (and the token plan's mask), not per micro-batch
    assert max(calls.values()) <= 3, calls


def test_on_policy_update_metrics_and_a_lower_loss_after(tiny_model_dir, batch):
    actor = _actor(tiny_model_dir, micro=4)
    old, _ = actor.compute_log_prob(batch, MicroBatching())
    data = batch.select(deepcopy=True)
    data.batch["old_log_probs"] = old
    metrics = actor.update_policy(data)
    assert set(metrics) == {
        "actor/pg_loss",
        "actor/entropy",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/pg_clipfrac_lower",
        "actor/grad_norm",
    }
    assert metrics["actor/pg_clipfrac"] == 0.0  # ratio 1 on the first step
    assert abs(metrics["actor/ppo_kl"]) < 1e-6
    mask = data.batch["response_mask"]
    expected_loss = agg_loss(-data.batch["advantages"], mask, "token-mean").item()  # ratio 1
    assert metrics["actor/pg_loss"] == pytest.approx(expected_loss, abs=1e-5)
    new, _ = actor.compute_log_prob(data, MicroBatching())
    after = agg_loss(-data.batch["advantages"] * torch.exp(new - old), mask, "token-mean")
    assert after.item() < expected_loss  # the step lowered the surrogate loss


def test_kl_loss_and_entropy_bonus(tiny_model_dir, batch):
    actor = _actor(
        tiny_model_dir,
        [
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.actor.kl_loss_coef=0.5",
            "actor_rollout_ref.actor.kl_loss_type=k2",
            "actor_rollout_ref.actor.entropy_coeff=0.01",
            "actor_rollout_ref.actor.ppo_epochs=2",
        ],
    )
    old, entropy = actor.compute_log_prob(batch, MicroBatching())
    data = batch.select(deepcopy=True)
    data.batch["old_log_probs"] = old
    data.batch["ref_log_prob"] = old - 0.1 * data.batch["response_mask"]
    mask = data.batch["response_mask"]
    metrics = actor.update_policy(data)
    # two epochs: the first sees the initial weights, the second the updated ones
    first_kl = agg_loss(kl_penalty(old, data.batch["ref_log_prob"], "k2"), mask, "token-mean")
    assert first_kl.item() == pytest.approx(0.005, abs=1e-6)
    assert metrics["actor/kl_coef"] == 0.5
    assert metrics["actor/kl_loss"] != pytest.approx(0.005, abs=1e-7)
    assert metrics["actor/ppo_kl"] > 0  # the second epoch is off-policy
    assert metrics["actor/entropy"] == pytest.approx(
        agg_loss(entropy, mask, "token-mean").item(), rel=0.05
    )


def test_update_names_the_missing_keys(tiny_model_dir, batch):
    actor = _actor(tiny_model_dir, ["actor_rollout_ref.actor.use_kl_loss=true"])
    with pytest.raises(
        KeyError, match="update_actor needs data.batch keys \\['old_log_probs', 'ref_log_prob'\\]"
    ):
        actor.update_policy(batch)
    reference = PPOActor(actor.model, None, actor.config)
    with pytest.raises(RuntimeError, match="has no optimizer"):
        reference.update_policy(batch)


@pytest.mark.parametrize("shuffle, micro", [(False, 4), (True, 2), (True, None)])
def test_fused_old_log_probs_are_a_separate_passes_and_so_is_the_update(tiny_model_dir, batch,
                                                                       shuffle, micro):  # fmt: skip
    """Three mini-batches (shuffled or not): the fused update's old log-probs equal a
    separate pass's (its first mini-batch's from its own forward), and the weights after it
    equal the separate path's (both to float rounding), with rollout correction on."""
    overrides = [f"actor_rollout_ref.actor.shuffle={shuffle}",
                 "actor_rollout_ref.actor.policy_loss.rollout_is=token"]  # fmt: skip
    batching = MicroBatching(micro_batch_size=3)  # another cut than the update's
    data = make_trajectory_batch(12, P, R, vocab_size=1961, seed=2)
    data.batch["rollout_log_probs"] = torch.full((12, R), -2.0)
    separate, fused = (_actor(tiny_model_dir, overrides, mini=4, micro=micro) for _ in range(2))
    fused.model.load_state_dict(separate.model.state_dict())
    one = data.select(deepcopy=True)
    one.batch["old_log_probs"] = separate.compute_log_prob(one, batching, calc_entropy=False)[0]
    want = separate.update_policy(one, step=3)
    two = data.select(deepcopy=True)
    got = fused.update_policy(two, step=3, old_log_prob_batching=batching)
    torch.testing.assert_close(two.batch["old_log_probs"], one.batch["old_log_probs"],
                               atol=1e-5, rtol=0)  # fmt: skip
    assert set(two.batch.keys()) == set(one.batch.keys())  # the bookkeeping is gone
    assert set(got) == set(want)
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-4), key
    for (name, a), b in zip(separate.model.state_dict().items(),
                            fused.model.state_dict().values(), strict=True):  # fmt: skip
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4, msg=name)


def test_fused_old_log_probs_need_one_epoch(tiny_model_dir, batch):
    actor = _actor(tiny_model_dir, ["actor_rollout_ref.actor.ppo_epochs=2"])
    with pytest.raises(ValueError, match="fused old log-probs need actor.ppo_epochs=1"):
        actor.update_policy(batch.select(deepcopy=True), old_log_prob_batching=MicroBatching())


def test_shared_prefixes_give_the_flat_update(tiny_model_dir, tiny_tokenizer):
    """Two GRPO groups of 4: the update with shared prefixes (the default) and the flat one
    report the same losses and gradient norm and leave the same weights."""
    v = len(tiny_tokenizer)
    data = batch_from_rows(grpo_group_rows(4, 48, 8, v, seed=5) + grpo_group_rows(4, 40, 10, v,
                                                                                  seed=6))  # fmt: skip
    overrides = ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.entropy_coeff=0.01"]
    results = []
    for shared in ("true", "false"):
        actor = _actor(tiny_model_dir, [*overrides, f"actor_rollout_ref.actor.shared_prefix={shared}"],
                       micro=4)  # fmt: skip
        assert actor.shared_prefix is (shared == "true")
        # plain SGD: Adam's first step is lr x sign(gradient), which rounding flips near 0
        actor.optimizer = torch.optim.SGD(actor.model.parameters(), lr=0.1)
        old, _ = actor.compute_log_prob(data, MicroBatching(micro_batch_size=4))
        step = data.select(deepcopy=True)
        step.batch["old_log_probs"] = old - 0.05 * step.batch["response_mask"]
        step.batch["ref_log_prob"] = old + 0.1 * step.batch["response_mask"]
        metrics = actor.update_policy(step)
        results.append((old, metrics, dict(actor.model.named_parameters())))
    (old_shared, shared, weights), (old_flat, flat, flat_weights) = results
    torch.testing.assert_close(old_shared, old_flat, atol=2e-5, rtol=0)
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"):
        assert shared[key] == pytest.approx(flat[key], rel=1e-4, abs=1e-6), key
    for name, weight in flat_weights.items():
        torch.testing.assert_close(weights[name], weight, atol=1e-6, rtol=0)
