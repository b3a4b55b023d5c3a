"""Micro-batch forward passes: trimmed inputs give the full forward's numbers."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

from agentrl.algos import entropy_from_logits, logprobs_from_logits
from agentrl.testing.workers import make_trajectory_batch
from agentrl.workers.forward import (
    chunkable_head,
    full_logits_log_probs,
    response_log_probs,
    response_values,
)

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
