"""Inference backends: the protocol, the embedded `hf` engine and the `sglang` client.

The protocol types import nothing heavy; `HFBackend` (torch, transformers),
`SGLangBackend`, `ServerLauncher` and `create_backend` load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from agentrl.rollout.backends.base import (
    BackendError,
    FinishReason,
    GenerationBackend,
    GenerationOutput,
)

_LAZY = {
    "HFBackend": "agentrl.rollout.backends.hf",
    "SGLangBackend": "agentrl.rollout.backends.sglang",
    "ServerLauncher": "agentrl.rollout.backends.launcher",
    "create_backend": "agentrl.rollout.backends.factory",
}

__all__ = ["BackendError", "FinishReason", "GenerationBackend", "GenerationOutput", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
