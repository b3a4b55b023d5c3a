"""The canary after a weight sync: each server's distribution on fixed sequences, compared
with the trainer's (``actor_rollout_ref.rollout.canary``; the run loop is
agentrl/workers/canary.py). Pure functions, no I/O.

    canary = CanarySet(sequences, trainer_log_probs, trainer_top)   # made once
    score = score_server(canary, server_log_probs, server_top)       # one server, one sync
    thresholds = Thresholds.calibrate(scores_at_first_sync, margin=4.0, floor=0.02)
    thresholds.diverged(score)                                       # why, or None

What is measured per server, over every scored token of every canary sequence:

- ``logprob_gap_max`` / ``logprob_gap_mean``: |server log-prob - trainer log-prob| of the
  sequence's own tokens (the trainer's greedy completions of a few prompts, so the tokens
  are ones the policy puts mass on);
- ``kl_topk``: KL(trainer || server) over the trainer's top-k tokens of each position,
  both renormalised on that set, where the engine answers top-k (a token the server's top-k
  does not hold gets the server's smallest top-k log-prob: an upper bound of its mass);
  None where it does not.

Thresholds are calibrated per engine and dtype at the first sync, where every server was
just sent the same weights as the trainer holds: the low median of the servers' values (one
broken server of three, or of two, does not set the bar) times ``margin``, at least
``floor``. So an
fp32 server (gaps ~1e-6) is held to the floor and a bf16 one (gaps ~0.1) to a few times
its own rounding: both are watched.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CANARY_MODES = ("every_sync", "every_n", "off")  # rollout.canary
ON_DIVERGENCE = ("stop", "warn")  # rollout.on_divergence (one server: nothing to drain to)
TopK = dict[int, float]  # token id -> log-prob, one position's top-k


@dataclass(frozen=True)
class CanarySet:
    """Fixed token sequences and the trainer's log-probs of their tokens 1.. (``log_probs[i]``
    has ``len(sequences[i]) - 1`` entries) and, when measured, its top-k per position."""

    sequences: list[list[int]]
    log_probs: list[list[float]]
    top_k: list[list[TopK]] | None = None

    def __post_init__(self) -> None:
        if not self.sequences:
            raise ValueError("a canary set needs at least one sequence")
        for i, (ids, lps) in enumerate(zip(self.sequences, self.log_probs, strict=True)):
            if len(ids) < 2 or len(lps) != len(ids) - 1:
                raise ValueError(f"canary sequence {i}: {len(lps)} log-probs for {len(ids)} "
                                 "tokens (need len - 1, and at least 2 tokens)")  # fmt: skip

    @property
    def k(self) -> int:
        """Top-k entries per position the trainer kept (0: none)."""
        return len(self.top_k[0][0]) if self.top_k else 0


@dataclass(frozen=True)
class CanaryScore:
    """One server's canary at one sync."""

    logprob_gap_max: float
    logprob_gap_mean: float
    kl_topk: float | None = None

    def metrics(self, suffix: str = "") -> dict[str, float]:
        out = {f"rollout/canary/logprob_gap_max{suffix}": self.logprob_gap_max,
               f"rollout/canary/logprob_gap_mean{suffix}": self.logprob_gap_mean}  # fmt: skip
        if self.kl_topk is not None:
            out[f"rollout/canary/kl_topk{suffix}"] = self.kl_topk
        return out


def score_server(canary: CanarySet, log_probs: Sequence[Sequence[float]],
                 top_k: Sequence[Sequence[TopK]] | None = None) -> CanaryScore:  # fmt: skip
    """A server's score from its log-probs of each canary sequence (and its top-k per
    position, where it gave them); a server that answered the wrong number of values is
    infinitely far (a broken server, not a close one)."""
    gaps: list[float] = []
    for want, got in zip(canary.log_probs, log_probs, strict=True):
        if len(got) != len(want):
            return CanaryScore(math.inf, math.inf, math.inf if canary.top_k else None)
        gaps += [abs(float(g) - w) for g, w in zip(got, want, strict=True)]
    gaps = [math.inf if math.isnan(g) else g for g in gaps]
    kl = None
    if canary.top_k and top_k is not None:
        kls = [topk_kl(p, q) for want, got in zip(canary.top_k, top_k, strict=True)
               for p, q in zip(want, got, strict=False)]  # fmt: skip
        kl = statistics.fmean(kls) if kls else math.inf
    return CanaryScore(max(gaps), statistics.fmean(gaps), kl)


def topk_kl(trainer: TopK, server: TopK) -> float:
    """KL(trainer || server) on the trainer's top-k tokens, both renormalised there; a
    token missing from the server's top-k gets its smallest top-k log-prob."""
    if not trainer:
        return 0.0
    if not server:
        return math.inf
    floor = min(server.values())
    tokens = list(trainer)
    p = _normalised([trainer[t] for t in tokens])
    q = _normalised([server.get(t, floor) for t in tokens])
    return max(0.0, sum(math.exp(a) * (a - b) for a, b in zip(p, q, strict=True)))


def _normalised(log_probs: list[float]) -> list[float]:
    top = max(log_probs)
    if not math.isfinite(top):  # no mass anywhere: read as uniform
        return [-math.log(len(log_probs))] * len(log_probs)
    total = top + math.log(sum(math.exp(v - top) for v in log_probs))
    return [v - total for v in log_probs]


@dataclass(frozen=True)
class Thresholds:
    """How far a server may be from the trainer before it counts as diverging."""

    logprob_gap_max: float
    kl_topk: float | None = None

    @classmethod
    def calibrate(cls, scores: Sequence[CanaryScore], margin: float, floor: float) -> Thresholds:
        """From the servers' scores at the first sync (identical weights): the low median
        of each value times ``margin``, at least ``floor``."""
        if not scores:
            raise ValueError("calibrating the canary needs at least one server's score")
        gap = _bar([s.logprob_gap_max for s in scores], margin, floor)
        kls = [s.kl_topk for s in scores if s.kl_topk is not None]
        return cls(gap, _bar(kls, margin, floor) if kls else None)

    def diverged(self, score: CanaryScore) -> str | None:
        """Why ``score`` is past these thresholds, or None."""
        if not score.logprob_gap_max <= self.logprob_gap_max:  # NaN diverges too
            return (f"canary log-prob gap {score.logprob_gap_max:.4g} > threshold "
                    f"{self.logprob_gap_max:.4g}")
        if self.kl_topk is not None and score.kl_topk is not None and not (
                score.kl_topk <= self.kl_topk):
            return f"canary top-k KL {score.kl_topk:.4g} > threshold {self.kl_topk:.4g}"
        return None


def _bar(values: list[float], margin: float, floor: float) -> float:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return floor
    return max(floor, margin * statistics.median_low(finite))


def canary_after_sync(mode: str, every_n: int, sync_number: int) -> bool:
    """Whether sync ``sync_number`` (1 for the first) runs the canary under ``mode``; the first
    always does unless ``off`` (it calibrates the thresholds)."""
    if mode not in CANARY_MODES:
        raise ValueError(f"actor_rollout_ref.rollout.canary is {mode!r}; choose one of "
                         f"{', '.join(CANARY_MODES)}")
    if mode == "off":
        return False
    if mode == "every_n" and every_n < 1:
        raise ValueError(f"actor_rollout_ref.rollout.canary_every_n must be >= 1, got {every_n}")
    return mode == "every_sync" or sync_number == 1 or (sync_number - 1) % every_n == 0


def aggregate(scores: dict[str, CanaryScore]) -> dict[str, float]:
    """The step's canary metrics: the worst server's values, and each server's with the
    suffix ``/server{i}`` (``i`` its place in ``scores``' order)."""
    out: dict[str, float] = {}
    values = list(scores.values())
    if not values:
        return out
    out["rollout/canary/logprob_gap_max"] = max(s.logprob_gap_max for s in values)
    out["rollout/canary/logprob_gap_mean"] = max(s.logprob_gap_mean for s in values)
    kls = [s.kl_topk for s in values if s.kl_topk is not None]
    if kls:
        out["rollout/canary/kl_topk"] = max(kls)
    for i, score in enumerate(values):
        out |= score.metrics(f"/server{i}")
    return out


__all__ = [
    "CANARY_MODES",
    "CanaryScore",
    "CanarySet",
    "ON_DIVERGENCE",
    "Thresholds",
    "TopK",
    "aggregate",
    "canary_after_sync",
    "score_server",
    "topk_kl",
]
