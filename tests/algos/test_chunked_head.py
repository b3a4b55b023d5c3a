"""Chunked output-layer log-probs: the full-logits numbers and gradients, without keeping
a (tokens x vocabulary) tensor for backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from agentrl.algos import entropy_from_logits, logprobs_from_logits
from agentrl.algos.chunked_head import chunk_rows, head_log_probs

N, H, V = 45, 16, 97  # 45 positions: chunks of 16 rows leave a ragged last chunk


def _inputs(seed: int, bias: bool, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, H, generator=gen, dtype=dtype).requires_grad_()
    weight = (torch.randn(V, H, generator=gen, dtype=dtype) * 0.5).requires_grad_()
    b = (torch.randn(V, generator=gen, dtype=dtype)).requires_grad_() if bias else None
    labels = torch.randint(0, V, (N,), generator=gen)
    return hidden, weight, b, labels


def _full(hidden, weight, b, labels, temperature):
    logits = F.linear(hidden, weight, b)
    logits = (logits if logits.dtype == torch.float64 else logits.float()) / temperature
    return logprobs_from_logits(logits, labels), entropy_from_logits(logits)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("bias", [False, True])
def test_values_and_gradients_equal_the_full_logits(temperature, bias):
    hidden, weight, b, labels = _inputs(0, bias)
    params = [hidden, weight] + ([b] if bias else [])
    gen = torch.Generator().manual_seed(1)
    g_lp, g_ent = torch.randn(N, generator=gen), torch.randn(N, generator=gen)
    lp, ent = head_log_probs(
        hidden,
        weight,
        labels,
        b,
        temperature,
        entropy=True,
        entropy_grad=True,
        chunk_elements=16 * V,
    )
    ref_lp, ref_ent = _full(hidden, weight, b, labels, temperature)
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=0)
    grads = torch.autograd.grad((lp * g_lp).sum() + (ent * g_ent).sum(), params)
    ref = torch.autograd.grad((ref_lp * g_lp).sum() + (ref_ent * g_ent).sum(), params)
    exact_params = [p.detach().double().requires_grad_() for p in params]
    e_lp, e_ent = _full(*exact_params[:2], exact_params[2] if bias else None, labels, temperature)
    exact = torch.autograd.grad(
        (e_lp * g_lp.double()).sum() + (e_ent * g_ent.double()).sum(), exact_params
    )
    for got, want, truth in zip(grads, ref, exact, strict=True):
        scale = truth.abs().max().item()  # fp32 rounding grows with the gradient's size
        torch.testing.assert_close(got, want, atol=1e-5 * scale, rtol=0)
        assert (got.double() - truth).abs().max() <= 1e-5 * scale  # float64's gradient


def test_entropy_as_a_metric_has_no_gradient_and_leaves_the_log_prob_gradient_alone():
    hidden, weight, _, labels = _inputs(2, False)
    lp, ent = head_log_probs(hidden, weight, labels, entropy=True, chunk_elements=16 * V)
    assert not ent.requires_grad and lp.requires_grad
    ref_lp, ref_ent = _full(hidden, weight, None, labels, 1.0)
    torch.testing.assert_close(ent, ref_ent.detach(), atol=1e-5, rtol=0)
    got = torch.autograd.grad(lp.sum(), [hidden, weight])
    want = torch.autograd.grad(ref_lp.sum(), [hidden, weight])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    lp_only, none = head_log_probs(hidden, weight, labels)
    assert none is None
    torch.testing.assert_close(lp_only, lp, atol=0, rtol=0)


def test_shapes_follow_the_labels():
    hidden, weight, _, labels = _inputs(3, False)
    lp, ent = head_log_probs(hidden.view(5, 9, H), weight, labels.view(5, 9), entropy=True)
    assert lp.shape == ent.shape == (5, 9) and lp.dtype == torch.float32


def test_bf16_hidden_states_match_the_full_path_within_bf16_noise():
    hidden, weight, _, labels = _inputs(4, False, dtype=torch.bfloat16)
    lp, _ = head_log_probs(hidden, weight, labels, chunk_elements=16 * V)
    ref_lp, _ = _full(hidden, weight, None, labels, 1.0)  # bf16 logits cast to fp32, as a model
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=0)
    (gh,) = torch.autograd.grad(lp.sum(), [hidden])
    (rh,) = torch.autograd.grad(ref_lp.sum(), [hidden])
    assert gh.dtype == torch.bfloat16
    torch.testing.assert_close(gh.float(), rh.float(), atol=2e-2, rtol=2e-2)


def test_nothing_of_vocabulary_size_per_token_is_kept_for_backward():
    hidden, weight, _, labels = _inputs(5, False)
    saved: list[torch.Size] = []

    def pack(t):
        saved.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        head_log_probs(hidden, weight, labels, entropy=True, entropy_grad=True)
    assert saved and max(s.numel() for s in saved) <= max(N * H, V * H)
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _full(hidden, weight, None, labels, 1.0)
    assert max(s.numel() for s in saved) >= N * V  # the reference path does keep them


def test_chunk_rows_fill_the_element_budget():
    assert chunk_rows(151_936) == (1 << 26) // 151_936
    assert chunk_rows(100, chunk_elements=1_000) == 16  # never fewer than 16 rows
    assert chunk_rows(10, chunk_elements=1_000) == 100


def test_a_non_positive_temperature_is_refused():
    hidden, weight, _, labels = _inputs(6, False)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        head_log_probs(hidden, weight, labels, temperature=0.0)
