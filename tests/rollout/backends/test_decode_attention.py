"""Tests for agentrl/rollout/backends/decode_attention.py: grouped-query decode attention
without repeated keys and values."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch
from transformers import AttentionInterface, Qwen2Config, Qwen2ForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from agentrl.models.tiny import train_tiny_tokenizer
from agentrl.rollout.backends.decode_attention import (
    ATTENTION_NAME,
    packed_decode_sdpa,
    use_packed_decode_attention,
)
from agentrl.rollout.backends.hf import HFBackend


class _Attention(torch.nn.Module):
    is_causal = True

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups


def _repeated_reference(query, key, value, mask, groups):
    """Attention over keys/values copied once per query head (what eager attention does)."""
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    return out.transpose(1, 2)  # (b, q, heads, dim)


def _padding_mask(batch: int, width: int, filled: list[tuple[int, int]]) -> torch.Tensor:
    mask = torch.zeros(batch, 1, 1, width, dtype=torch.bool)
    for row, (start, end) in enumerate(filled):
        mask[row, ..., start:end] = True
    return mask


@pytest.mark.parametrize("groups", [2, 7])
def test_one_token_step_matches_attention_over_repeated_keys(groups):
    torch.manual_seed(0)
    batch, kv_heads, length, dim = 3, 2, 40, 16
    query = torch.randn(batch, kv_heads * groups, 1, dim)
    key, value = torch.randn(batch, kv_heads, length, dim), torch.randn(batch, kv_heads, length, dim)
    mask = _padding_mask(batch, length, [(0, 30), (5, 30), (12, 30)])  # left pads, unwritten tail
    out, weights = packed_decode_sdpa(_Attention(groups), query, key, value, mask)
    assert weights is None and out.shape == (batch, 1, kv_heads * groups, dim)
    expected = _repeated_reference(query, key, value, mask, groups)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
    # every head attends to its own group's key/value head: swapping the kv heads changes
    # exactly the heads of both groups
    swapped, _ = packed_decode_sdpa(_Attention(groups), query, key.flip(1), value.flip(1), mask)
    assert not torch.allclose(swapped, out)
    torch.testing.assert_close(
        swapped, _repeated_reference(query, key.flip(1), value.flip(1), mask, groups),
        atol=1e-6, rtol=1e-5,
    )  # fmt: skip


def test_a_mask_wider_than_the_keys_is_cut_and_no_mask_attends_everywhere():
    torch.manual_seed(1)
    query, key, value = torch.randn(2, 4, 1, 8), torch.randn(2, 2, 10, 8), torch.randn(2, 2, 10, 8)
    wide = _padding_mask(2, 16, [(0, 10), (3, 10)])
    out, _ = packed_decode_sdpa(_Attention(2), query, key, value, wide)
    torch.testing.assert_close(out, _repeated_reference(query, key, value, wide[..., :10], 2))
    out, _ = packed_decode_sdpa(_Attention(2), query, key, value, None)
    torch.testing.assert_close(out, _repeated_reference(query, key, value, None, 2))


@pytest.mark.parametrize("case", ["prefill", "no_groups", "per_head_mask"])
def test_other_calls_go_to_transformers_sdpa_unchanged(case):
    torch.manual_seed(2)
    groups, q_len = (1, 1) if case == "no_groups" else (2, 5 if case == "prefill" else 1)
    query = torch.randn(2, 2 * groups, q_len, 8)
    key, value = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    heads = 2 * groups if case == "per_head_mask" else 1
    mask = torch.ones(2, heads, q_len, 5, dtype=torch.bool).tril(diagonal=5 - q_len)
    module = _Attention(groups)
    out, _ = packed_decode_sdpa(module, query, key, value, mask)
    expected, _ = sdpa_attention_forward(module, query, key, value, mask)
    assert torch.equal(out, expected)


def _gqa_model(attn: str = "sdpa", heads: int = 6, kv_heads: int = 2) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=128, hidden_size=heads * 8, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, max_position_embeddings=512)  # fmt: skip
    config._attn_implementation = attn
    return Qwen2ForCausalLM(config).eval()


def test_only_sdpa_grouped_query_models_are_switched():
    model = _gqa_model()
    assert use_packed_decode_attention(model) is True
    assert model.config._attn_implementation == ATTENTION_NAME
    assert use_packed_decode_attention(model) is False  # already switched: not sdpa any more
    eager = _gqa_model("eager")
    assert use_packed_decode_attention(eager) is False
    assert eager.config._attn_implementation == "eager"
    plain = _gqa_model(kv_heads=6)  # one key/value head per query head
    assert use_packed_decode_attention(plain) is False
    assert plain.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("padded", [True, False])
def test_batch_decoding_matches_eager_attention(padded):
    """The switched model's batch decode, left-padded or not (transformers may then drop the
    mask): same greedy tokens and scores (1e-5) as the same weights under eager attention
    (which repeats keys/values), so the padding mask reaches the packed path."""
    model = _gqa_model()
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    assert use_packed_decode_attention(model)
    ids = torch.randint(3, 128, (3, 12), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(3, 12, dtype=torch.long)
    if padded:
        mask[0, :5], mask[1, :2] = 0, 0
    kwargs = {"attention_mask": mask, "max_new_tokens": 24, "do_sample": False,
              "output_scores": True, "return_dict_in_generate": True, "pad_token_id": 0}  # fmt: skip
    got, want = model.generate(ids, **kwargs), eager.generate(ids, **kwargs)
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(got.scores, want.scores, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_the_hf_backend_decodes_through_the_packed_attention():
    tokenizer = train_tiny_tokenizer(vocab_size=300, corpus_lines=2000)
    model = _gqa_model()
    model.resize_token_embeddings(len(tokenizer))
    reference = copy.deepcopy(model)
    reference.set_attn_implementation("eager")
    backend = HFBackend(model, tokenizer, max_num_seqs=4)
    assert backend.packed_decode_attention and model.config._attn_implementation == ATTENTION_NAME
    calls = []

    def counting(module, query, *args, **kwargs):
        calls.append(query.shape[2])
        return packed_decode_sdpa(module, query, *args, **kwargs)

    AttentionInterface.register(ATTENTION_NAME, counting)
    try:
        prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]]
        params = {"temperature": 0, "max_new_tokens": 10, "ignore_eos": True}

        async def run(engine):
            return await asyncio.gather(
                *(engine.generate(p, params, f"r{i}") for i, p in enumerate(prompts))
            )

        got = asyncio.run(run(backend))
        want = asyncio.run(run(HFBackend(reference, tokenizer, max_num_seqs=4)))
    finally:
        AttentionInterface.register(ATTENTION_NAME, packed_decode_sdpa)
    assert calls.count(1) == 2 * 9  # 2 layers x 9 one-token decode steps
    for a, b in zip(got, want, strict=True):
        assert a.output_ids == b.output_ids
        torch.testing.assert_close(torch.tensor(a.output_log_probs),
                                   torch.tensor(b.output_log_probs), atol=1e-5, rtol=0)
