"""Tests for agentrl/rollout/backends/hf_sampling.py: the hf backend's sampling parameters
and per-row sampling (the backend's outputs under sampling: tests/rollout/backends/test_hf.py)."""

from __future__ import annotations

import pytest
import torch

from agentrl.rollout.backends.hf_sampling import RowSampler, SamplingParams, sample_categorical


def test_sampling_params_parsing():
    params = SamplingParams.from_dict(
        {"max_new_tokens": 5, "stop_token_ids": 7, "stop": "</a>", "top_k": None}
    )
    assert (params.stop_token_ids, params.stop, params.top_k) == ((7,), ("</a>",), -1)
    assert SamplingParams.from_dict({"temperature": 0}).greedy
    assert not SamplingParams.from_dict(None).greedy
    assert SamplingParams.from_dict({}).skip_special_tokens is False


@pytest.mark.parametrize("params", [
    [{"temperature": 0.8, "top_k": 7}, {"temperature": 1.0, "top_k": 3, "top_p": 0.5}],
    [{"temperature": 0.8, "top_k": 7}, {"temperature": 1.0, "top_p": 0.9}],  # one row: no cap
    [{"top_k": 5, "min_p": 0.2}, {"temperature": 0.0}],  # a greedy row does not count
])
def test_top_k_selects_instead_of_sorting_with_the_same_probabilities(params):
    """With top-k on every sampled row the sampler takes the top k (a partial selection);
    the kept tokens and their probabilities are those of a full sort."""
    rows = [SamplingParams.from_dict({"max_new_tokens": 1, **p}) for p in params]
    sampler = RowSampler(rows, torch.device("cpu"))
    capped = all(
        p.get("top_k", -1) > 0 for p in params if p.get("temperature", 1.0) > 0
    )
    assert (sampler.top_k_cap < 1000) == capped
    scaled = torch.randn(len(params), 1000, generator=torch.Generator().manual_seed(0)) * 3
    probs, order = sampler.filtered_probs(scaled)
    full = RowSampler(rows, torch.device("cpu"))
    full.top_k_cap = 2**62  # the sort path
    full_probs, full_order = full.filtered_probs(scaled)
    dense = torch.zeros_like(scaled).scatter(-1, order, probs)
    full_dense = torch.zeros_like(scaled).scatter(-1, full_order, full_probs)
    sampled = [i for i, p in enumerate(params) if p.get("temperature", 1.0) > 0]
    # (a greedy row takes its argmax whatever it would have sampled)
    torch.testing.assert_close(dense[sampled], full_dense[sampled], atol=1e-7, rtol=0)
    if capped:
        assert probs.shape[-1] == max(p["top_k"] for p in params if "top_k" in p)


def test_sample_categorical_follows_the_probabilities():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 2.0]]).repeat(50000, 1)
    draws = sample_categorical(probs, torch.Generator().manual_seed(0)).view(-1, 2)
    first = torch.bincount(draws[:, 0], minlength=4) / len(draws)
    torch.testing.assert_close(first, torch.tensor([0.1, 0.0, 0.6, 0.3]), atol=0.01, rtol=0)
    assert (draws[:, 1] == 3).all()  # unnormalised, and zero-probability tokens never come
    again = sample_categorical(probs, torch.Generator().manual_seed(0)).view(-1, 2)
    assert torch.equal(draws, again)  # the seed decides
