"""Decode-step attention for grouped-query models without repeated keys and values.

A grouped-query model (Qwen2.5-0.5B: 14 query heads share 2 key/value heads, 7 per group)
decodes one token per step. transformers' SDPA path calls
`scaled_dot_product_attention(..., enable_gqa=True)` only when there is no attention
mask; the hf engine always has one (left-padded prompts), so releases before 5.24 (4.57,
5.17 and 5.20 read) copy each layer's keys and values once per query head (`repeat_kv`)
at every decode step: a (batch x heads x cached length x head_dim) tensor per layer,
twice, read again by the kernel. On CPU, one Qwen2.5-0.5B-shaped layer at 64 x 1,024 cached positions takes about
225 ms that way and 4 ms without the copies (2 cores, torch 2.13).

`packed_decode_sdpa` runs a one-token step on the key/value heads themselves: the
`groups` query heads that share a key/value head become `groups` queries of one head,
(batch, heads, 1, dim) -> (batch, kv_heads, groups, dim), so SDPA reads each cached key
once and the padding mask (the same for every head) broadcasts as it is. Every other call
(prefill, models without groups, dropout, soft-capping, position biases, per-head masks)
goes to transformers' own `sdpa_attention_forward`, unchanged. transformers 5.24 packs
the same way itself; registering this function makes the engine's decode the same on
every release it supports.

    use_packed_decode_attention(model)  # True when the model now uses it
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

logger = logging.getLogger(__name__)

ATTENTION_NAME = "agentrl_packed_sdpa"


def packed_decode_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (b, heads, q, dim), key and value
    (b, kv_heads, k, dim); returns (b, q, heads, dim) and no weights."""
    groups = getattr(module, "num_key_value_groups", 1)
    if (
        query.shape[2] != 1
        or groups == 1
        or dropout
        or kwargs.get("softcap") is not None
        or kwargs.get("position_bias") is not None
        or (attention_mask is not None and attention_mask.shape[1] != 1)
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask,
            dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs,
        )  # fmt: skip
    batch, heads, _, dim = query.shape
    packed = query.reshape(batch, heads // groups, groups, dim)  # head h = kv head h // groups
    if attention_mask is not None:  # (b, 1, 1, >= k): one row for every head and query
        attention_mask = attention_mask[..., : key.shape[-2]]
    out = torch.nn.functional.scaled_dot_product_attention(
        packed, key, value, attn_mask=attention_mask, scale=scaling
    )  # (b, kv_heads, groups, dim_v)
    return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def _grouped(model: torch.nn.Module) -> bool:
    return any(getattr(m, "num_key_value_groups", 1) > 1 for m in model.modules())


def use_packed_decode_attention(model: torch.nn.Module) -> bool:
    """Make `model` (an SDPA grouped-query causal LM) decode with `packed_decode_sdpa`.

    Returns False and changes nothing for other attention implementations (eager, flash,
    flex) and models without key/value groups. The function is registered under
    `ATTENTION_NAME` with SDPA's mask builder, so the model builds the masks it built
    before."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not _grouped(model):
        return False
    AttentionInterface.register(ATTENTION_NAME, packed_decode_sdpa)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    model.set_attn_implementation(ATTENTION_NAME)
    used = config._attn_implementation == ATTENTION_NAME
    if not used:  # pragma: no cover - a model class that refuses a dynamic switch
        logger.warning("hf backend: %s kept its attention implementation", type(model).__name__)
    return used
