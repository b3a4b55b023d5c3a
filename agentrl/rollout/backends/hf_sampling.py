"""Sampling of the embedded `hf` backend (agentrl/rollout/backends/hf.py): SGLang's
sampling parameters checked, and per-row sampling inside one micro-batch.

Requests with different parameters share a forward pass: each row has its own temperature,
top-k, top-p and min-p (``RowSampler``). Temperature 0 is greedy (argmax). Log-probs are
``log_softmax(logits / temperature)`` before top-k/top-p/min-p filtering (temperature 1 for
greedy rows), as the trainer computes them and SGLang returns them. With top-k on every
sampled row the top k are selected instead of sorting the vocabulary; draws invert the CDF
with one uniform number per row from the backend's seeded generator
(``sample_categorical``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch

_GREEDY_EPS = 1e-6  # temperatures below this mean greedy, as in SGLang
# SGLang sampling params the hf backend does not implement (rejected with a clear error)
_UNSUPPORTED = frozenset(
    "frequency_penalty presence_penalty repetition_penalty min_new_tokens regex json_schema "
    "ebnf logit_bias".split()
)


@dataclass(frozen=True)
class SamplingParams:
    """SGLang's sampling parameters that the hf backend implements (SGLang's defaults)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 (or 0) = off
    min_p: float = 0.0
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = False  # SGLang defaults to true; tool parsing needs false
    no_stop_trim: bool = False
    spaces_between_special_tokens: bool = True  # accepted for compatibility; no effect
    n: int = 1

    @classmethod
    def from_dict(cls, params: Mapping[str, Any] | None) -> SamplingParams:
        """Validate SGLang-named parameters; ValueError names the key that is wrong."""
        params = dict(params or {})
        known = {f.name for f in fields(cls)}
        for key in params:
            if key in _UNSUPPORTED:
                raise ValueError(f"sampling param {key!r} is not supported by the hf backend")
            if key not in known:
                raise ValueError(f"unknown sampling param {key!r}; valid: {sorted(known)}")
        params = {k: v for k, v in params.items() if v is not None}
        for key in ("stop_token_ids", "stop"):
            value = params.get(key, ())
            params[key] = (value,) if isinstance(value, (str, int)) else tuple(value)
        sp = cls(**params)
        sp._check()
        return sp

    def _check(self) -> None:
        problems = []
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 0:
            problems.append(f"max_new_tokens must be an int >= 0, got {self.max_new_tokens!r}")
        if not self.temperature >= 0:
            problems.append(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            problems.append(f"top_k must be -1 (off) or >= 1, got {self.top_k!r}")
        if not 0 <= self.min_p <= 1:
            problems.append(f"min_p must be in [0, 1], got {self.min_p!r}")
        if self.n != 1:
            problems.append(f"n must be 1 (repeat the prompt instead), got {self.n!r}")
        if not all(isinstance(t, int) for t in self.stop_token_ids):
            problems.append(f"stop_token_ids must be ints, got {list(self.stop_token_ids)!r}")
        if not all(isinstance(s, str) and s for s in self.stop):
            problems.append(f"stop must be non-empty strings, got {list(self.stop)!r}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature < _GREEDY_EPS


class RowSampler:
    """Per-row temperature / top-k / top-p / min-p sampling of one micro-batch."""

    def __init__(self, params: list[SamplingParams], device: torch.device) -> None:
        self.params = list(params)
        self.device = device
        self.all_greedy = all(p.greedy for p in self.params)
        if not self.all_greedy:
            self.greedy = torch.tensor([p.greedy for p in self.params], device=device)
            self.temperature = torch.tensor(
                [1.0 if p.greedy else p.temperature for p in self.params], device=device
            )[:, None]  # (B, 1)
            self.top_k = torch.tensor(
                [p.top_k if p.top_k > 0 else 2**62 for p in self.params], device=device
            )[:, None]
            self.top_p = torch.tensor([p.top_p for p in self.params], device=device)[:, None]
            self.min_p = torch.tensor([p.min_p for p in self.params], device=device)[:, None]
        self.filtered = any(_filters(p) for p in self.params)
        self.top_k_cap = _top_k_cap(self.params)

    def select(self, keep: list[int]) -> RowSampler:
        fresh = RowSampler.__new__(RowSampler)
        fresh.params, fresh.device = [self.params[j] for j in keep], self.device
        fresh.all_greedy = all(p.greedy for p in fresh.params)
        fresh.filtered = any(_filters(p) for p in fresh.params)
        fresh.top_k_cap = _top_k_cap(fresh.params)
        if not self.all_greedy:
            index = torch.tensor(keep, device=self.device)
            for name in ("greedy", "temperature", "top_k", "top_p", "min_p"):
                setattr(fresh, name, getattr(self, name)[index])
        return fresh

    def filtered_probs(self, scaled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(probs, order): the tokens in descending order (``order`` holds their ids; only
        the top ``top_k_cap`` when every row sets top-k: a partial selection, not a sort of
        the vocabulary) with their probabilities under the whole vocabulary's softmax, 0
        where top-k, top-p or min-p drops them."""
        if self.top_k_cap < scaled.shape[-1]:
            sorted_logits, order = torch.topk(scaled, self.top_k_cap, dim=-1)  # (B, K)
        else:
            sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)  # (B, V)
        probs = torch.exp(sorted_logits - torch.logsumexp(scaled, dim=-1, keepdim=True))
        ranks = torch.arange(probs.shape[-1], device=probs.device)[None, :]  # (1, K)
        before = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above each
        drop = (ranks >= self.top_k) | (before >= self.top_p)
        drop |= probs < self.min_p * probs[:, :1]
        drop[:, 0] = False  # the most likely token always stays
        return probs.masked_fill(drop, 0.0), order

    def sample(
        self, logits: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Next tokens (B,) and their log-probs (B,) under logits / temperature (B, V)."""
        tokens = logits.argmax(dim=-1)  # (B,)
        if self.all_greedy:
            log_probs = torch.log_softmax(logits, dim=-1)  # (B, V), temperature 1
        else:
            scaled = logits / self.temperature  # (B, V); greedy rows have temperature 1
            log_probs = torch.log_softmax(scaled, dim=-1)  # (B, V)
            if not self.filtered:  # plain sampling: no vocabulary sort at every step
                sampled = sample_categorical(log_probs.exp(), generator)
                tokens = torch.where(self.greedy, tokens, sampled)
                return tokens, log_probs.gather(-1, tokens[:, None])[:, 0]
            probs, order = self.filtered_probs(scaled)
            picked = sample_categorical(probs, generator)  # (B,) sorted ranks
            sampled = order.gather(-1, picked[:, None])[:, 0]  # (B,)
            tokens = torch.where(self.greedy, tokens, sampled)
        return tokens, log_probs.gather(-1, tokens[:, None])[:, 0]


def sample_categorical(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row of (B, V) unnormalised probabilities, by inverting the CDF: one
    uniform number per row (``torch.multinomial`` on CPU draws far more: 7 ms against
    0.3 ms for 128 x 2K). A zero-probability token is never drawn."""
    cdf = probs.cumsum(dim=-1)  # (B, V)
    u = torch.rand(
        (probs.shape[0], 1), generator=generator, device=probs.device, dtype=cdf.dtype
    ) * cdf[:, -1:]  # (B, 1) in [0, total)
    return torch.searchsorted(cdf, u, right=True)[:, 0].clamp_(max=probs.shape[-1] - 1)


def _top_k_cap(params: list[SamplingParams]) -> int:
    """The largest top-k of the sampled rows when every one sets it (the tokens that can
    be drawn are among that many), else no cap: a partial selection replaces the sort."""
    sampled = [p for p in params if not p.greedy]
    if sampled and all(p.top_k > 0 for p in sampled):
        return max(p.top_k for p in sampled)
    return sys.maxsize


def _filters(params: SamplingParams) -> bool:
    """Whether sampling with `params` drops tokens (top-k, top-p or min-p on)."""
    return not params.greedy and (params.top_k > 0 or params.top_p < 1.0 or params.min_p > 0.0)
