"""The hf backend's KV cache: buffers that grow a chunk of positions at a time.

transformers' `DynamicCache` concatenates every decode step's keys and values onto the
cache, so each step allocates a new, slightly longer (batch x heads x length x head_dim)
tensor per layer and copies the whole cache into it. A process's first long generations
ran up to 2-3x slower than later ones (issue 27; on CPU, 64 x 1,024 tokens on the `small`
tiny model, bench/kv_cache.py: 53-60 s first, 31-32 s after; with this cache 18 s and 18 s,
docs/workers.md). Most likely an allocator pays for sizes it has not held yet (on CPU fresh
pages from the kernel, on GPU `cudaMalloc`); the mechanism was not isolated, the effect of
removing the per-step tensors was measured.

`ChunkedKVLayer` keeps each layer's keys and values in one buffer whose length is the
filled length rounded up to `chunk` positions, written in place; it grows (one copy) only
when a chunk fills. The prefill attends to the prompt's positions alone (a view of the
buffer); each decode step sees the whole buffer: the positions not yet written lie
beyond every query's position, so the causal mask hides them, and transformers pads the
2-D attention mask with zeros to the buffer's length. Every tensor of a decode step (keys,
values, the mask) keeps one shape for `chunk` steps, so the allocator reuses the same
blocks, and the per-step copy of the whole cache is gone.

Greedy tokens are the same as with `DynamicCache`; log-probs agree to float rounding
(attention sums over a few more, masked, positions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from agentrl.rollout.backends.base import KV_CACHES

try:  # transformers >= 4.56 builds caches from per-layer objects
    from transformers.cache_utils import DynamicCache, DynamicLayer
except ImportError:  # pragma: no cover - older transformers: plain DynamicCache only
    from transformers import DynamicCache

    DynamicLayer = None

if TYPE_CHECKING:
    from transformers import PretrainedConfig

DEFAULT_CHUNK = 128  # positions; 16, 64, 128, 256: steady CPU generation within 8% (one run each)


def _round_up(n: int, chunk: int) -> int:
    return -(-n // chunk) * chunk


if DynamicLayer is not None:

    class ChunkedKVLayer(DynamicLayer):
        """One full-attention layer's KV in a buffer of `chunk`-rounded length.

        `keys` / `values` are the whole buffers (batch, kv_heads, capacity, head_dim);
        `length` is how many positions are written. `get_seq_length` reports `length`
        (the model derives new tokens' cache positions from it); `get_mask_sizes` reports
        the capacity after the coming update, the length attention will see.
        """

        def __init__(self, chunk: int = DEFAULT_CHUNK) -> None:
            if chunk < 1:
                raise ValueError(f"chunk must be >= 1 position, got {chunk}")
            super().__init__()
            self.chunk = chunk
            self.length = 0

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.device = key_states.device
            self.keys = key_states.new_zeros(*key_states.shape[:2], 0, key_states.shape[3])
            self.values = value_states.new_zeros(*value_states.shape[:2], 0, value_states.shape[3])
            self.is_initialized = True

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            start, end = self.length, self.length + key_states.shape[-2]
            if end > self.keys.shape[-2]:
                self.keys = self._grown(self.keys, _round_up(end, self.chunk))
                self.values = self._grown(self.values, _round_up(end, self.chunk))
            self.keys[:, :, start:end] = key_states
            self.values[:, :, start:end] = value_states
            self.length = end
            if start == 0:  # the prefill sees what it wrote: see get_mask_sizes
                return self.keys[:, :, :end], self.values[:, :, :end]
            return self.keys, self.values

        def _grown(self, buffer: torch.Tensor, capacity: int) -> torch.Tensor:
            # zeros, not empty: masked positions still enter softmax(QK^T)V as 0 x value,
            # and 0 x NaN from uninitialised memory would be NaN
            new = buffer.new_zeros(*buffer.shape[:2], capacity, buffer.shape[3])
            new[:, :, : self.length] = buffer[:, :, : self.length]
            return new

        def get_seq_length(self) -> int:
            return self.length

        def get_mask_sizes(self, query_length: int | torch.Tensor) -> tuple[int, int]:
            if isinstance(query_length, torch.Tensor):  # transformers 4.x: the cache_position
                query_length = query_length.shape[0]
            if self.length == 0:
                # the prefill: exactly the prompt. Given the buffer's length, transformers
                # (5.24) drops the mask of an empty cache whose padding lies past the
                # queries (StaticCache's prefill) and relies on SDPA's causal flag, which
                # it leaves off for one query: a one-token prompt alone in its batch then
                # attended to every unwritten, zero position
                return query_length, 0
            capacity = self.keys.shape[-2] if self.is_initialized else 0
            return max(capacity, _round_up(self.length + query_length, self.chunk)), 0

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError(f"crop takes a negative count of positions, got {tokens_to_remove}")
            if tokens_to_remove == 0 or not self.is_initialized:
                return
            new_length = max(self.length + tokens_to_remove, 0)
            self.keys[:, :, new_length : self.length] = 0
            self.values[:, :, new_length : self.length] = 0
            self.length = new_length

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.is_initialized:
                self.keys = self.keys[indices, ...]
                self.values = self.values[indices, ...]

        def reset(self) -> None:
            # the buffers are dropped, not zeroed: transformers releases differ here (5.17
            # zeroes a DynamicLayer's tensors, 5.24 drops them); the next update starts afresh
            self.length = 0
            self.keys = self.values = None
            self.is_initialized = False


def chunked_kv_cache(config: PretrainedConfig, chunk: int = DEFAULT_CHUNK) -> DynamicCache:
    """A `DynamicCache` for `config` (the model's transformers config, not agentrl's) whose
    full-attention layers are `ChunkedKVLayer`s.

    Sliding-window, KV-sharing and other special layers keep the layer transformers picks
    for them; with a transformers release that has no per-layer caches, the plain
    `DynamicCache` is returned.
    """
    cache = DynamicCache(config=config)
    layers = getattr(cache, "layers", None)
    if DynamicLayer is None or layers is None:  # pragma: no cover - older transformers
        return cache
    for i, layer in enumerate(layers):
        if type(layer) is DynamicLayer:
            layers[i] = ChunkedKVLayer(chunk)
    return cache


def make_kv_cache(config: PretrainedConfig, kind: str = "chunked") -> DynamicCache:
    """The hf engine's cache for one micro-batch: `chunked` (`chunked_kv_cache`, the
    default) or `dynamic` (transformers' `DynamicCache`, one concatenation per step: the
    reference, and the way back should a model's attention not take the chunked buffers)."""
    if kind == "chunked":
        return chunked_kv_cache(config)
    if kind == "dynamic":
        return DynamicCache(config=config)
    raise ValueError(f"unknown kv_cache {kind!r}; choose one of {', '.join(KV_CACHES)}")
