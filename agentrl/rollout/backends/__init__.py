"""Inference backends: the protocol, the embedded `hf` engine and the `sglang` client."""

from agentrl.rollout.backends.base import (
    BackendError,
    FinishReason,
    GenerationBackend,
    GenerationOutput,
)

__all__ = ["BackendError", "FinishReason", "GenerationBackend", "GenerationOutput"]
