"""The inference-backend protocol the rollout engine talks to (docs/backends.md, "The protocol").

A backend is any object with these coroutines; `hf` (embedded transformers) and
`sglang` (HTTP client) are ours, and a user may plug their own (a vLLM client, a scripted
backend in tests) by passing it to `AsyncRolloutEngine`.

`sampling_params` use SGLang's names, so the sglang client forwards them unchanged:

    max_new_tokens (int, required)   temperature (float)   top_p (float)
    top_k (int, -1 = off)            stop_token_ids (list[int])
    skip_special_tokens (bool)       no_stop_trim (bool)

A backend reports a failure by raising `BackendError`; `retryable=True` (connection
errors, 429, 5xx) tells the engine that the same call may succeed later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

HF_ENGINE_KWARGS = ("batch_wait_s", "seed", "device", "kv_cache")  # rollout.engine_kwargs of hf
KV_CACHES = ("chunked", "dynamic")  # the hf engine's kv_cache (agentrl/rollout/backends/kv_cache.py)


def unknown_hf_engine_kwargs(engine_kwargs: Any) -> list[str]:
    """The keys of `engine_kwargs` the hf engine does not take, sorted."""
    return sorted(set(engine_kwargs or {}) - set(HF_ENGINE_KWARGS))
LOAD_BALANCE = ("least_loaded", "round_robin")  # rollout.load_balance; the first: the default

FinishReason = Literal["stop", "length", "abort"]


@dataclass
class GenerationOutput:
    """One generation: the exact sampled ids, their text and their log-probs."""

    output_ids: list[int]
    text: str
    finish_reason: FinishReason
    output_log_probs: list[float] | None = None  # one per output id when requested
    meta_info: dict[str, Any] = field(default_factory=dict)  # e.g. matched stop, latency

    @property
    def weight_version(self) -> int:
        """The policy version the backend reported for this generation
        (``meta_info["weight_version"]``, SGLang's field) as an int; -1 when it reported
        none or a version that is not a whole number."""
        version = self.meta_info.get("weight_version")
        try:
            return int(version)
        except (TypeError, ValueError):
            return -1

    @property
    def token_weight_versions(self) -> int | list[int]:
        """The policy version of each output id when the backend reports one per token
        (``meta_info["token_weight_versions"]``: vLLM, where an update in the middle of a
        request splits it), else `weight_version` for them all."""
        per_token = self.meta_info.get("token_weight_versions")
        if per_token is None or len(per_token) != len(self.output_ids):
            return self.weight_version
        return [int(v) for v in per_token]

    def __post_init__(self) -> None:
        if self.finish_reason not in ("stop", "length", "abort"):
            raise ValueError(f"finish_reason must be stop, length or abort, got "
                             f"{self.finish_reason!r}")
        if self.output_log_probs is not None and len(self.output_log_probs) != len(
                self.output_ids):
            raise ValueError(f"{len(self.output_log_probs)} log-probs for "
                             f"{len(self.output_ids)} output ids")


class BackendError(RuntimeError):
    """A generation call failed; `retryable` says whether trying again may help."""

    def __init__(self, message: str, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


@runtime_checkable
class GenerationBackend(Protocol):
    """What the rollout engine needs from an inference engine."""

    async def generate(self, input_ids: list[int], sampling_params: dict[str, Any],
                       request_id: str) -> GenerationOutput: ...

    async def abort(self, request_id: str) -> None: ...

    async def update_weights(self, source: Any) -> None: ...

    async def release_memory(self) -> None: ...

    async def resume_memory(self) -> None: ...
