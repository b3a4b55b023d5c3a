"""Micro-batch forward passes: trimmed inputs, and shared prefixes computed once, give the
full forward's numbers."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

from agentrl.algos import entropy_from_logits, logprobs_from_logits
from agentrl.testing.workers import (
    batch_from_rows,
    forked_session_rows,
    grpo_group_rows,
    make_trajectory_batch,
)
from agentrl.workers import forward as forward_module
from agentrl.workers.forward import (
    chunkable_head,
    full_logits_log_probs,
    response_log_probs,
    response_values,
    shared_prefix_problem,
)
from agentrl.workers.fsdp import enable_activation_checkpointing

P, R = 12, 20


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


@pytest.fixture(scope="module")
def batch(tiny_tokenizer):
    return make_trajectory_batch(6, P, R, vocab_size=len(tiny_tokenizer), seed=3).batch


def _full_logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits[:, P - 1 : -1]  # (B, R, V)


def test_log_probs_and_entropy_match_the_untrimmed_forward(model, batch):
    response_attention = batch["attention_mask"][:, P:].bool()
    with torch.no_grad():
        log_probs, entropy = response_log_probs(model, batch, temperature=0.7, entropy=True)
    logits = _full_logits(model, batch) / 0.7
    expected = logprobs_from_logits(logits, batch["responses"])
    assert log_probs.shape == (6, R)
    torch.testing.assert_close(
        log_probs[response_attention], expected[response_attention], atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        entropy[response_attention],
        entropy_from_logits(logits)[response_attention],
        atol=1e-5,
        rtol=0,
    )
    assert (log_probs[~response_attention] == 0).all() and (entropy[~response_attention] == 0).all()


def test_each_row_alone_gives_the_same_numbers(model, batch):
    with torch.no_grad():
        together, none = response_log_probs(model, batch)
        alone = torch.cat([response_log_probs(model, batch[i : i + 1])[0] for i in range(6)])
    assert none is None
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=0)


def test_entropy_carries_a_gradient_only_when_asked(model, batch):
    _, detached = response_log_probs(model, batch[:2], entropy=True)
    _, with_grad = response_log_probs(model, batch[:2], entropy=True, entropy_grad=True)
    assert not detached.requires_grad and with_grad.requires_grad


def test_values_are_the_head_output_before_each_response_token(tiny_model_dir, batch):
    torch.manual_seed(0)
    critic = AutoModelForTokenClassification.from_pretrained(tiny_model_dir, num_labels=1).eval()
    with torch.no_grad():
        values = response_values(critic, batch)
        full = critic(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits[:, P - 1 : -1, 0]  # (B, R)
    response_attention = batch["attention_mask"][:, P:].bool()
    torch.testing.assert_close(
        values[response_attention], full[response_attention], atol=1e-5, rtol=0
    )
    assert (values[~response_attention] == 0).all()


def test_the_chunked_path_gives_the_full_logits_numbers_and_parameter_gradients(
    tiny_model_dir, batch
):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).train()
    assert chunkable_head(model) is model.lm_head
    sub = batch[:3]
    mask = sub["attention_mask"][:, P:].float()
    grads = []
    results = []
    for fn in (response_log_probs, full_logits_log_probs):
        model.zero_grad(set_to_none=True)
        log_probs, entropy = fn(model, sub, temperature=0.8, entropy=True, entropy_grad=True)
        ((log_probs + 0.1 * entropy) * mask).sum().backward()
        results.append((log_probs.detach(), entropy.detach()))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    for name, want in grads[1].items():
        scale = max(want.abs().max().item(), 1e-3)
        torch.testing.assert_close(grads[0][name], want, atol=1e-5 * scale, rtol=0, msg=name)
    assert "forward" not in vars(model.lm_head)  # the head's own forward is back


def test_the_head_comes_back_when_the_model_raises(model, batch):
    with pytest.raises(ValueError, match="temperature must be > 0"):  # raised inside the head
        response_log_probs(model, batch[:1], temperature=0.0)
    assert "forward" not in vars(model.lm_head)


def test_models_that_rescale_their_logits_take_the_full_path(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model.config.final_logit_softcapping = 30.0
    assert chunkable_head(model) is None


# ---------------------------------------------------------------- shared prefixes


@pytest.fixture(scope="module")
def shared_batch(tiny_tokenizer):
    """Two GRPO groups (prompts of 40 and 30 tokens) and a session forked twice."""
    v = len(tiny_tokenizer)
    rows = (grpo_group_rows(4, 40, 10, v, seed=1) + grpo_group_rows(3, 30, 12, v, seed=2)
            + forked_session_rows(3, 20, 20, v, seed=3))  # fmt: skip
    return batch_from_rows(rows).batch


def _passes(model) -> list[int]:
    """Counts the forward passes of the model's transformer body (appends to the list)."""
    calls: list[int] = []
    model.base_model.register_forward_pre_hook(lambda *_: calls.append(1))
    return calls


def _log_probs_and_grads(model, batch, shared):
    model.zero_grad(set_to_none=True)
    log_probs, entropy = response_log_probs(
        model, batch, temperature=0.8, entropy=True, entropy_grad=True, shared_prefix=shared
    )
    weights = torch.linspace(-1, 1, log_probs.numel()).reshape(log_probs.shape)
    ((log_probs * weights + 0.1 * entropy) * batch["attention_mask"][:, -log_probs.shape[1]:]
     ).sum().backward()  # fmt: skip
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return log_probs.detach(), entropy.detach(), grads


def _assert_same(got, want, grads_got=None, grads_want=None):
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=0)
    for name, w in (grads_want or {}).items():
        scale = max(w.abs().max().item(), 1e-3)
        torch.testing.assert_close(grads_got[name], w, atol=1e-5 * scale, rtol=0, msg=name)


def test_shared_prefixes_give_the_flat_log_probs_entropy_and_gradients(tiny_model_dir,
                                                                       shared_batch):  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).train()
    calls = _passes(model)
    *flat, flat_grads = _log_probs_and_grads(model, shared_batch, shared=False)
    assert len(calls) == 1
    assert len(forward_module.plan_prefix_tree(shared_batch).levels) == 3
    *shared, shared_grads = _log_probs_and_grads(model, shared_batch, shared=True)
    assert len(calls) == 1 + 3  # the plan's three levels (roots, branches, own suffixes)
    _assert_same(shared, flat, shared_grads, flat_grads)
    assert (flat[0] != 0).sum() == shared_batch["attention_mask"][:, -flat[0].shape[1]:].sum()


def test_shared_prefixes_give_the_flat_values_and_gradients(tiny_model_dir, shared_batch):
    torch.manual_seed(0)
    critic = AutoModelForTokenClassification.from_pretrained(tiny_model_dir, num_labels=1)
    critic.dropout.p = 0.0  # as the critic worker loads it (classifier_dropout 0)
    results = []
    for shared in (False, True):
        critic.zero_grad(set_to_none=True)
        values = response_values(critic.train(), shared_batch, shared_prefix=shared)
        (values ** 2).sum().backward()
        results.append((values.detach(), {n: p.grad.clone() for n, p in critic.named_parameters()}))
    (flat, flat_grads), (shared, shared_grads) = results
    _assert_same([shared], [flat], shared_grads, flat_grads)


def _mutated(monkeypatch, mutate):
    """plan_prefix_tree as forward.py calls it, with ``mutate`` applied to every later level."""
    from dataclasses import replace

    real = forward_module.plan_prefix_tree

    def plan(batch):
        found = real(batch)
        levels = [found.levels[0], *(mutate(level) for level in found.levels[1:])]
        return replace(found, levels=levels)

    monkeypatch.setattr(forward_module, "plan_prefix_tree", plan)


def _past_opened(level):  # a past padded in the middle no longer masked
    from dataclasses import replace

    mask = level.attention_mask.clone()
    mask[:, : -level.input_ids.shape[1]] = 1
    return replace(level, attention_mask=mask)


def _positions_restarted(level):  # each piece's positions from 0, as if it had no past
    from dataclasses import replace

    return replace(level, position_ids=level.position_ids - level.position_ids[:, :1])


@pytest.mark.parametrize("mutate", [_past_opened, _positions_restarted])
def test_the_equality_check_catches_a_broken_mask_or_positions(monkeypatch, model, shared_batch,
                                                              mutate):  # fmt: skip
    with torch.no_grad():
        flat, _ = response_log_probs(model, shared_batch)
        _mutated(monkeypatch, mutate)
        broken, _ = response_log_probs(model, shared_batch, shared_prefix=True)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(broken, flat, atol=2e-5, rtol=0)


def test_activation_checkpointing_in_training_runs_the_flat_pass(tiny_model_dir, shared_batch):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).train()
    enable_activation_checkpointing(model)
    assert "activation checkpointing" in shared_prefix_problem(model)
    calls = _passes(model)
    shared, _ = response_log_probs(model, shared_batch, shared_prefix=True)
    assert len(calls) == 1  # one flat pass
    with torch.no_grad():  # no backward to replay: the cache is safe, the tree runs
        assert shared_prefix_problem(model) is None
        tree, _ = response_log_probs(model, shared_batch, shared_prefix=True)
    assert len(calls) == 1 + 3
    torch.testing.assert_close(tree, shared.detach(), atol=2e-5, rtol=0)


def test_shared_prefixes_under_fsdp2_on_two_ranks_give_the_flat_gradients(tiny_model_dir,
                                                                          tmp_path):  # fmt: skip
    """Two gloo ranks, the model sharded with FSDP2, each rank its own rows: the shared
    path's several forwards before one backward reduce to the flat path's gradients."""
    import json

    import torch.multiprocessing as mp

    from agentrl.testing.workers import shared_prefix_rank

    mp.spawn(shared_prefix_rank, args=(2, str(tmp_path / "store"), str(tiny_model_dir),
                                       str(tmp_path)), nprocs=2, join=True)  # fmt: skip
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    # rank 0 also has a forked session (3 levels); rank 1 runs a dummy pass to match it
    assert [r["shared_passes"] for r in results] == [3, 3]
    assert all(r["flat_passes"] == 1 for r in results)
    for result in results:
        assert result["log_prob_diff"] < 2e-5
        assert result["relative_grad_diff"] < 1e-5


def test_shared_prefixes_with_lora_adapters_give_the_flat_numbers(tiny_model_dir, shared_batch):
    """A peft model (its forward takes **kwargs: the cache goes by the HF model's name)."""
    pytest.importorskip("peft")
    from omegaconf import OmegaConf

    from agentrl.workers.lora import apply_lora

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    lora = OmegaConf.create({"target_modules": "all-linear", "lora_rank": 4, "lora_alpha": 8})
    model = apply_lora(model, lora).train()
    torch.manual_seed(0)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # non-zero adapters, so their gradients and outputs matter
            torch.nn.init.normal_(param, std=0.1)
    *flat, flat_grads = _log_probs_and_grads(model, shared_batch, shared=False)
    calls = _passes(model)
    *shared, shared_grads = _log_probs_and_grads(model, shared_batch, shared=True)
    assert len(calls) == 3
    assert sorted(flat_grads) == sorted(shared_grads) and all("lora_" in n for n in flat_grads)
    _assert_same(shared, flat, shared_grads, flat_grads)
