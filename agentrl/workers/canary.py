"""The canary after a weight sync: every server scores fixed sequences, the trainer scores
them on the weights it sent, and a server whose distribution moved away is drained.

    watch = CanaryWatch(CanarySettings.of(rollout_cfg), backend, loop, tokenizer)
    metrics = watch.after_sync(model, sync_number, scores_here=True)   # every rank: a collective

``actor_rollout_ref.rollout.canary`` (``every_sync`` | ``every_n`` | ``off``): after the
syncs it names (the first always: it calibrates), in order:

1. The canary set, made once at the first: each of ``canary_prompts`` (token ids, or a text
   rendered as one user turn; null -> the first ``canary_count`` validation prompts, which
   the trainer's driver fills in) followed by the trainer's own greedy completion of
   ``canary_length`` tokens (a fixed length, so every rank of a sharded model runs the
   same forwards).
2. The trainer's log-probs of those sequences (and its top-``canary_top_k``) on the weights
   it just sent: every rank runs the forward (the sharded model gathers its layers).
3. Every server of the backend (``canary_servers``: each live server; the embedded engine
   is one) scores them through the same prompt-log-prob call the probe and a teacher use
   (``score_on``); agentrl/rollout/backends/canary.py compares the two:
   ``rollout/canary/logprob_gap_max``, ``..._mean``, ``kl_topk``: the worst server, and
   ``.../server{i}`` per server.
4. Thresholds are calibrated at the first canary (median over servers x ``canary_margin``,
   at least ``canary_floor``). A server past them (or one whose weight check failed at this
   sync: ``verify_weights`` mismatches are handed in) is drained: no new calls, its calls in
   flight fail over to another server (``ServerBackend.drain``), a warning names it and
   ``rollout/canary/drained`` counts it; it is sent the weights again (``reload``) and
   scored again, and re-admitted (``rollout/canary/readmitted``) once it passes, now or
   at a later canary. ``rollout/canary/servers_out`` is the number drained after the canary.
5. When no server passes (one server, or all of them, after the weights were sent again):
   ``on_divergence: stop`` raises ``CanaryDivergence`` naming each server and why; ``warn``
   logs it and keeps them all.

Between syncs, ``before_rollout`` (called by the rollout before it generates) drains, reloads
and re-scores a server whose reported weight version changed since the sync.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from agentrl.rollout.backends.canary import (
    CanaryScore,
    CanarySet,
    Thresholds,
    aggregate,
    canary_after_sync,
    score_server,
)

logger = logging.getLogger(__name__)

_MAX_PROMPT_TOKENS = 64  # a longer canary prompt keeps its last tokens (the canary's cost)


class CanaryDivergence(RuntimeError):
    """No rollout server's distribution matches the trainer's after a weight sync."""


@dataclass(frozen=True)
class CanarySettings:
    """The ``rollout.canary*`` and ``on_divergence`` keys (docs/config.md)."""

    mode: str = "every_sync"
    every_n: int = 10
    prompts: tuple[Any, ...] = ()
    length: int = 16
    top_k: int = 5
    margin: float = 4.0
    floor: float = 0.02
    on_divergence: str = "stop"

    # the rollout section's keys `of` reads
    KEYS: ClassVar[tuple[str, ...]] = (
        "canary", "canary_every_n", "canary_prompts", "canary_length", "canary_top_k",
        "canary_margin", "canary_floor", "on_divergence")

    @classmethod
    def of(cls, rollout: Mapping[str, Any]) -> CanarySettings:
        """From `actor_rollout_ref.rollout` (a DictConfig or a mapping with `KEYS`)."""
        return cls(
            mode=str(rollout["canary"]), every_n=int(rollout["canary_every_n"]),
            prompts=tuple(rollout["canary_prompts"] or ()),
            length=int(rollout["canary_length"]), top_k=int(rollout["canary_top_k"]),
            margin=float(rollout["canary_margin"]), floor=float(rollout["canary_floor"]),
            on_divergence=str(rollout["on_divergence"]),
        )  # fmt: skip


def prompt_ids(prompt: Any, tokenizer: Any) -> list[int]:
    """A canary prompt's token ids: a list of ids as is, a text as one user turn of the chat
    template (plain encoding for a tokenizer without one)."""
    if isinstance(prompt, (list, tuple)):
        ids = [int(t) for t in prompt]
    elif getattr(tokenizer, "chat_template", None):
        ids = list(tokenizer.apply_chat_template([{"role": "user", "content": str(prompt)}],
                                                 add_generation_prompt=True, tokenize=True))
    else:
        ids = list(tokenizer.encode(str(prompt)))
    if not ids:
        raise ValueError("actor_rollout_ref.rollout.canary_prompts has an empty prompt")
    return ids[-_MAX_PROMPT_TOKENS:]


def _eval(model: torch.nn.Module, fn: Callable[[], Any]) -> Any:
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return fn()
    finally:
        model.train(training)


def greedy_sequences(model: torch.nn.Module, prompts: Sequence[list[int]],
                     length: int) -> list[list[int]]:  # fmt: skip
    """Each prompt followed by the model's greedy continuation of exactly ``length`` tokens."""

    def run() -> list[list[int]]:
        device = next(model.parameters()).device
        out = []
        for ids in prompts:
            seq = list(ids)
            for _ in range(length):
                logits = model(input_ids=torch.tensor([seq], device=device), use_cache=False).logits
                seq.append(int(logits[0, -1].argmax()))
            out.append(seq)
        return out

    return _eval(model, run)


def trainer_canary(model: torch.nn.Module, sequences: list[list[int]], top_k: int) -> CanarySet:
    """The trainer's log-probs (and top-k) of ``sequences`` under the model's weights: one
    forward over them all, right-padded (a causal model's real positions do not see the
    padding)."""

    def run() -> CanarySet:
        device = next(model.parameters()).device
        longest = max(len(ids) for ids in sequences)
        ids = torch.zeros(len(sequences), longest, dtype=torch.long, device=device)  # (B, T)
        mask = torch.zeros_like(ids)
        for row, seq in enumerate(sequences):
            ids[row, :len(seq)] = torch.tensor(seq, device=device)
            mask[row, :len(seq)] = 1
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        lp = torch.log_softmax(logits[:, :-1].float(), -1)  # (B, T - 1, V)
        chosen = lp.gather(2, ids[:, 1:, None])[..., 0]  # (B, T - 1)
        log_probs = [chosen[row, :len(seq) - 1].cpu().tolist()
                     for row, seq in enumerate(sequences)]  # fmt: skip
        tops = None
        if top_k > 0:
            values, indices = lp.topk(min(top_k, lp.shape[-1]), dim=-1)  # (B, T - 1, k)
            values, indices = values.cpu().tolist(), indices.cpu().tolist()
            tops = [[dict(zip(i, v, strict=True)) for i, v in
                     zip(indices[row][:len(seq) - 1], values[row][:len(seq) - 1], strict=True)]
                    for row, seq in enumerate(sequences)]  # fmt: skip
        return CanarySet(sequences, log_probs, tops)

    return _eval(model, run)


class CanaryWatch:
    """The canary of one rollout backend across syncs (module docstring). ``backend`` has
    ``canary_servers()`` and ``score_on(server, ids, top_k)``; a backend that can drain
    (``ServerBackend``) has ``drain``, ``readmit`` and ``reload`` too. ``loop`` runs its
    coroutines (a ``LoopThread``)."""

    def __init__(self, settings: CanarySettings, backend: Any, loop: Any, tokenizer: Any,
                 prompts: Sequence[Any] | None = None) -> None:  # fmt: skip
        self.settings = settings
        self.backend = backend
        self.loop = loop
        self.prompts = [prompt_ids(p, tokenizer) for p in (prompts or settings.prompts)]
        self.sequences: list[list[int]] | None = None
        self.thresholds: Thresholds | None = None
        self._index: dict[str, int] = {}  # server -> its i in the /server{i} metrics
        self._last: CanarySet | None = None  # the last sync's trainer side
        self._between = [0, 0]  # drained, re-admitted by `before_rollout` since the last sync

    @property
    def enabled(self) -> bool:
        return (self.settings.mode != "off" and bool(self.prompts)
                and hasattr(self.backend, "canary_servers"))  # fmt: skip

    def due(self, sync_number: int) -> bool:
        return self.enabled and canary_after_sync(self.settings.mode, self.settings.every_n,
                                                  sync_number)  # fmt: skip

    def after_sync(self, model: torch.nn.Module, sync_number: int, scores_here: bool = True,
                   mismatches: Sequence[Exception] = ()) -> dict[str, float]:  # fmt: skip
        """The canary of sync ``sync_number`` (nothing when not due). Every rank calls it (the
        trainer's side is a collective); only those with ``scores_here`` ask the servers.
        ``mismatches``: this sync's ``WeightMismatchError``s (each names its server)."""
        if not self.due(sync_number):
            return {}
        started = time.perf_counter()
        if self.sequences is None:
            self.sequences = greedy_sequences(model, self.prompts, self.settings.length)
        canary = trainer_canary(model, self.sequences, self.settings.top_k)
        if not scores_here:
            return {}
        failed = {str(getattr(e, "server", "")): str(e) for e in mismatches}
        try:
            metrics = self._check(canary, failed, mismatches)
        except NotImplementedError as err:  # an engine API that cannot score prompts
            logger.warning("no canary on this backend: %s (actor_rollout_ref.rollout.canary)",
                           err)  # fmt: skip
            self.prompts = []  # not enabled from now on
            if mismatches:  # nothing drains them here: the weight check stops the run
                raise mismatches[0] from err
            return {}
        metrics["timing/canary_s"] = time.perf_counter() - started
        return metrics

    # ------------------------------------------------------------------ servers

    def _check(self, canary: CanarySet, failed: dict[str, str],
               mismatches: Sequence[Exception] = ()) -> dict[str, float]:  # fmt: skip
        servers = list(self.backend.canary_servers())
        for server in servers:
            self._index.setdefault(server, len(self._index))
        answered = self.loop.run(self._score_all(canary, servers))
        scores = {s: score for s, score in answered.items() if score is not None}
        unscored = len(answered) - len(scores)
        judged = [s for s in servers if s in scores or s in failed]
        if not scores:  # nothing to compare with (a weight-check mismatch still raises)
            if mismatches:
                raise mismatches[0]
            return {"rollout/canary/unscored": float(unscored)}
        if self.thresholds is None:  # on the servers that passed the weight check
            sound = [score for s, score in scores.items() if s not in failed] or list(
                scores.values())
            self.thresholds = Thresholds.calibrate(sound, self.settings.margin,
                                                   self.settings.floor)  # fmt: skip
            logger.info("canary thresholds calibrated on %d server(s): log-prob gap %.4g, "
                        "top-k KL %s", len(scores), self.thresholds.logprob_gap_max,
                        self.thresholds.kl_topk)  # fmt: skip
        diverging = {s: self.thresholds.diverged(score) for s, score in scores.items()}
        diverging = {s: why for s, why in diverging.items() if why}
        diverging |= {s: why for s, why in failed.items() if s in judged}
        metrics = aggregate({s: scores[s] for s in sorted(scores, key=self._index.get)})
        metrics = {_renumber(k, scores, self._index): v for k, v in metrics.items()}
        drained, readmitted = self._act(canary, servers, diverging, judged)
        self._last = canary
        (drained_before, readmitted_before), self._between = self._between, [0, 0]
        metrics |= {
            "rollout/canary/drained": float(drained + drained_before),
            "rollout/canary/readmitted": float(readmitted + readmitted_before),
            "rollout/canary/servers_out": float(len(self._drained())),
            "rollout/canary/threshold": self.thresholds.logprob_gap_max,
            "rollout/canary/unscored": float(unscored),
        }
        return metrics

    def _act(self, canary: CanarySet, servers: list[str], diverging: dict[str, str],
             judged: Sequence[str] | None = None) -> tuple[int, int]:  # fmt: skip
        """Drain the diverging servers (unless that is every one), send them the weights
        again and re-score them; re-admit the drained ones of ``judged`` (default: every
        one of ``servers``, all scored) that pass; with no server passing,
        ``on_divergence``. Returns (drained now, re-admitted now)."""
        was_out = set(self._drained())
        every = len(diverging) == len(servers)
        drained = 0
        for server, why in diverging.items():
            if not every and server not in was_out and self._drain(server, why):
                drained += 1
        still = dict(diverging)
        if still and hasattr(self.backend, "reload"):
            still = self.loop.run(self._reload_and_rescore(canary, list(still), still))
        if still and len(still) == len(servers):
            self._no_server_passes(still)
            return drained, 0
        for server, why in still.items():  # every one failed at first: some pass now
            if every and server not in was_out and self._drain(server, why):
                drained += 1
        readmitted = 0
        for server in self._drained():
            if server in (servers if judged is None else judged) and server not in still:
                self.backend.readmit(server)
                readmitted += 1
        for server, why in still.items():
            logger.warning("rollout server %s stays drained: %s", server, why)
        return drained, readmitted

    def before_rollout(self) -> None:
        """A server whose reported weight version is no longer the last sync's (its weights
        changed since: an update sent by someone else, a restart) is drained, sent the
        weights again and re-scored against the last sync's canary before the rollout uses
        it; counted in the next sync's ``rollout/canary/drained`` and ``readmitted``."""
        drift = getattr(self.backend, "version_drift", None)
        if self._last is None or drift is None:
            return
        changed = self.loop.run(drift())
        if not changed:
            return
        why = {url: f"it reports weight version {version}, not {self.backend.weight_version} "
                    "(its weights changed since the sync)" for url, version in changed.items()}
        drained, readmitted = self._act(self._last, list(self.backend.canary_servers()), why,
                                        judged=list(why))  # fmt: skip
        self._between[0] += drained
        self._between[1] += readmitted

    def _drain(self, server: str, why: str) -> bool:
        drain = getattr(self.backend, "drain", None)
        if drain is None or not drain(server, why):
            logger.warning("rollout server %s diverges (%s) and cannot be drained here",
                           server, why)  # fmt: skip
            return False
        logger.warning("rollout server %s diverges from the trainer after the weight sync "
                       "(%s): drained, sending it the weights again", server, why)  # fmt: skip
        return True

    def _no_server_passes(self, diverging: dict[str, str]) -> None:
        detail = "; ".join(f"{s}: {why}" for s, why in diverging.items())
        if self.settings.on_divergence == "stop":
            raise CanaryDivergence(
                f"no rollout server matches the trainer after the weight sync ({detail}); "
                "actor_rollout_ref.rollout.on_divergence=warn keeps training on them, "
                "canary=off skips the check")
        logger.warning("no rollout server matches the trainer after the weight sync (%s); "
                       "training goes on (actor_rollout_ref.rollout.on_divergence=warn)", detail)

    def _drained(self) -> list[str]:
        drained = getattr(self.backend, "drained", None)
        return list(drained()) if drained is not None else []

    async def _score_all(self, canary: CanarySet,
                         servers: list[str]) -> dict[str, CanaryScore | None]:  # fmt: skip
        scored = await asyncio.gather(*(self._score(canary, s) for s in servers))
        return dict(zip(servers, scored, strict=True))

    async def _score(self, canary: CanarySet, server: str) -> CanaryScore | None:
        """One server's score; None when its call failed (a busy or timed-out server is not
        judged on it: that is the failover's business, not a divergence)."""
        from agentrl.rollout.backends.base import BackendError

        k, tag = self.settings.top_k, uuid.uuid4().hex[:8]  # ids unique across syncs
        try:
            answers = await asyncio.gather(*(
                self.backend.score_on(server, ids, k, request_id=f"agentrl-canary-{tag}-{i}")
                for i, ids in enumerate(canary.sequences)))  # fmt: skip
        except BackendError as err:
            logger.warning("rollout server %s did not score the canary: %s", server, err)
            return None
        tops = [top for _, top in answers]
        return score_server(canary, [lp for lp, _ in answers],
                            None if any(t is None for t in tops) else tops)  # fmt: skip

    async def _reload_and_rescore(self, canary: CanarySet, servers: list[str],
                                  why: dict[str, str]) -> dict[str, str]:  # fmt: skip
        """The servers of ``servers`` still diverging after a reload, with why."""
        from agentrl.rollout.backends.base import BackendError

        still: dict[str, str] = {}
        for server in servers:
            try:
                await self.backend.reload(server)
            except BackendError as err:
                still[server] = f"{why[server]}; its reload failed: {err}"
                continue
            score = await self._score(canary, server)
            again = ("it did not score the canary" if score is None
                     else self.thresholds.diverged(score))  # fmt: skip
            if again is not None:
                still[server] = f"{again} after a reload"
        return still


def _renumber(key: str, scores: dict[str, CanaryScore], index: dict[str, int]) -> str:
    """``aggregate`` numbers servers by their place in ``scores``; the metric keeps each
    server's first-seen index across syncs (a dead server does not shift the others)."""
    head, sep, tail = key.rpartition("/server")
    if not sep or not tail.isdigit():
        return key
    server = sorted(scores, key=index.get)[int(tail)]
    return f"{head}/server{index[server]}"


__all__ = [
    "CanaryDivergence",
    "CanarySettings",
    "CanaryWatch",
    "greedy_sequences",
    "prompt_ids",
    "trainer_canary",
]
