"""Tests for agentrl/rollout/backends/kv_cache.py: the hf backend's chunk-grown KV cache."""

from __future__ import annotations

import asyncio
import functools

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache, Qwen2Config
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from agentrl.rollout.backends import hf
from agentrl.rollout.backends import kv_cache as kv_cache_module
from agentrl.rollout.backends.kv_cache import ChunkedKVLayer, chunked_kv_cache, make_kv_cache


def kv(batch: int, length: int, fill: float, heads: int = 2, dim: int = 4) -> torch.Tensor:
    return torch.full((batch, heads, length, dim), fill)


def test_buffer_grows_a_chunk_at_a_time_and_is_written_in_place():
    layer = ChunkedKVLayer(chunk=4)
    assert layer.get_mask_sizes(3) == (3, 0)  # the prefill sees the prompt alone
    keys, values = layer.update(kv(2, 3, 1.0), kv(2, 3, -1.0))  # prefill of 3 positions
    assert keys.shape == (2, 2, 3, 4) and layer.get_seq_length() == 3
    assert layer.keys.shape == (2, 2, 4, 4) and layer.keys[:, :, 3:].eq(0).all()  # unwritten
    assert keys.eq(1).all() and values.eq(-1).all()
    buffer = layer.keys.data_ptr()
    assert keys.data_ptr() == buffer  # a view of the buffer, not a copy
    assert layer.get_mask_sizes(1) == (4, 0)  # the 4th position still fits
    assert layer.get_mask_sizes(torch.tensor([3])) == (4, 0)  # 4.x passes the cache_position
    keys, _ = layer.update(kv(2, 1, 2.0), kv(2, 1, -2.0))
    assert layer.keys.data_ptr() == buffer  # no new tensor while the chunk has room
    assert keys[:, :, 3].eq(2).all() and layer.get_seq_length() == 4
    assert layer.get_mask_sizes(1) == (8, 0)  # the 5th position needs the next chunk
    keys, values = layer.update(kv(2, 1, 3.0), kv(2, 1, -3.0))
    assert layer.keys.data_ptr() != buffer and keys.shape[-2] == 8
    assert keys[0, 0, :, 0].tolist() == [1, 1, 1, 2, 3, 0, 0, 0]  # old positions copied over
    assert values[0, 0, :, 0].tolist() == [-1, -1, -1, -2, -3, 0, 0, 0]


def test_batch_select_crop_and_reset():
    layer = ChunkedKVLayer(chunk=4)
    rows = torch.arange(3.0)[:, None, None, None].expand(3, 2, 5, 4)
    layer.update(rows.clone(), -rows.clone())
    layer.batch_select_indices(torch.tensor([0, 2]))
    assert layer.keys.shape == (2, 2, 8, 4) and layer.get_seq_length() == 5
    assert layer.keys[:, 0, 0, 0].tolist() == [0.0, 2.0]
    layer.crop(-2)
    assert layer.get_seq_length() == 3 and layer.keys[:, :, 3:].eq(0).all()
    with pytest.raises(ValueError, match="negative"):
        layer.crop(1)
    layer.reset()
    assert layer.get_seq_length() == 0 and not layer.is_initialized


def test_chunk_must_be_positive():
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        ChunkedKVLayer(chunk=0)


def test_full_attention_layers_are_chunked_sliding_ones_are_kept():
    full = Qwen2Config(num_hidden_layers=3, hidden_size=16, intermediate_size=32,
                       num_attention_heads=2, num_key_value_heads=1, vocab_size=64)
    cache = chunked_kv_cache(full, chunk=16)
    assert [type(layer) for layer in cache.layers] == [ChunkedKVLayer] * 3
    assert all(layer.chunk == 16 for layer in cache.layers)
    hybrid = Qwen2Config(num_hidden_layers=3, hidden_size=16, intermediate_size=32,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=64,
                         layer_types=["full_attention", "sliding_attention", "full_attention"],
                         sliding_window=8, use_sliding_window=True)
    kinds = [type(layer) for layer in chunked_kv_cache(hybrid).layers]
    assert kinds == [ChunkedKVLayer, DynamicSlidingWindowLayer, ChunkedKVLayer]
    assert DynamicLayer not in kinds


def decode(model, cache, ids, mask, steps, drop_at=None):
    """Greedy prefill + decode as the hf backend runs it; the logits of every step."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    all_logits = []
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                    cache=cache, use_cache=True, logits_to_keep=1)
        for step in range(steps):
            logits = out.logits[:, -1].float()
            all_logits.append(logits)
            tokens = logits.argmax(-1)
            if step == drop_at:  # the first row finished: keep the others
                keep = torch.arange(1, len(tokens))
                cache.batch_select_indices(keep)
                mask, positions, tokens = mask[keep], positions[keep], tokens[keep]
            mask = torch.cat([mask, mask.new_ones(len(tokens), 1)], dim=1)
            positions = positions[:, -1:] + 1
            out = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=positions,
                        cache=cache, use_cache=True, logits_to_keep=1)
    return all_logits


def left_padded(prompts, pad):
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def test_decoding_matches_dynamic_cache_across_chunk_boundaries(varied_model_dir, prompts):
    model = AutoModelForCausalLM.from_pretrained(varied_model_dir).eval()
    ids, mask = left_padded(prompts, pad=0)  # prompts of 4-19 tokens: ragged left padding
    reference = decode(model, DynamicCache(config=model.config), ids, mask, 30, drop_at=12)
    chunked = decode(model, chunked_kv_cache(model.config, chunk=8), ids, mask, 30, drop_at=12)
    assert len(set(torch.stack(reference[:12]).argmax(-1).flatten().tolist())) > 3
    for want, got in zip(reference, chunked, strict=True):
        assert got.argmax(-1).tolist() == want.argmax(-1).tolist()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_backend_greedy_and_sampled_outputs_are_unchanged(varied_model_dir, prompts, monkeypatch):
    """The backend with 8-position chunks (many boundaries) against `kv_cache="dynamic"`
    (transformers' DynamicCache): the same tokens, greedy and sampled from one seed, and
    log-probs within 1e-5."""

    def generate(kv_cache, params):
        backend = hf.HFBackend.from_pretrained(varied_model_dir, seed=3, kv_cache=kv_cache)

        async def go():
            return await asyncio.gather(
                *(backend.generate(p, params, f"r{i}") for i, p in enumerate(prompts))
            )

        return asyncio.run(go())

    greedy = {"temperature": 0.0, "max_new_tokens": 37}
    sampled = {"temperature": 1.0, "max_new_tokens": 37, "ignore_eos": True}
    want = [generate("dynamic", greedy), generate("dynamic", sampled)]
    monkeypatch.setattr(kv_cache_module, "chunked_kv_cache",
                        functools.partial(chunked_kv_cache, chunk=8))
    got = [generate("chunked", greedy), generate("chunked", sampled)]
    for expected, outputs in zip(want, got, strict=True):
        assert [o.output_ids for o in outputs] == [o.output_ids for o in expected]
        for a, b in zip(outputs, expected, strict=True):
            torch.testing.assert_close(
                torch.tensor(a.output_log_probs), torch.tensor(b.output_log_probs),
                atol=1e-5, rtol=1e-5,
            )
    assert max(len(o.output_ids) for o in got[1]) == 37  # past 4 chunk boundaries


def test_the_backend_names_a_wrong_kv_cache(tiny_model_dir):
    with pytest.raises(ValueError, match="kv_cache must be one of chunked, dynamic, got 'static'"):
        hf.HFBackend.from_pretrained(tiny_model_dir, kv_cache="static")
    with pytest.raises(ValueError, match="unknown kv_cache 'static'"):
        make_kv_cache(Qwen2Config(num_hidden_layers=1), "static")


@pytest.mark.parametrize("kv_cache", ["chunked", "dynamic"])
def test_a_one_token_prompt_alone_in_its_batch_is_greedy(varied_model_dir, kv_cache):
    """A one-token prompt with nothing beside it (the CI failure of the three-server test):
    transformers builds no mask for an empty cache and one query, so the prefill must
    attend to the written position only, not to the buffer's unwritten zeros."""
    model = AutoModelForCausalLM.from_pretrained(varied_model_dir).eval()
    backend = hf.HFBackend.from_pretrained(varied_model_dir, kv_cache=kv_cache)
    params = {"temperature": 0.0, "max_new_tokens": 6, "ignore_eos": True}
    for prompt in ([453], [7], [453, 223]):
        out = asyncio.run(backend.generate(prompt, params, "alone"))
        ids = prompt + out.output_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()
        want = logits[len(prompt) - 1 : -1].argmax(-1).tolist()
        assert out.output_ids == want, (prompt, out.output_ids, want)
        torch.testing.assert_close(
            torch.tensor(out.output_log_probs),
            logits[len(prompt) - 1 : -1].log_softmax(-1).gather(-1, torch.tensor(want)[:, None])[:, 0],
            atol=1e-4, rtol=1e-4,
        )
