"""The multi-turn rollout: one asyncio state machine per sample against a backend.

    from agentrl.rollout import AsyncRolloutEngine
    engine = AsyncRolloutEngine(cfg.actor_rollout_ref.rollout, tokenizer, backend, tools)

See docs/rollout.md: the state machine, the token layout of a trajectory, fault behaviour.
The names below load on first use, so importing a submodule (the parsers, for config
validation) stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AsyncRolloutEngine": "agentrl.rollout.engine",
    "BatchContext": "agentrl.rollout.batch_context",
    "AsyncRolloutRequest": "agentrl.rollout.request",
    "FinishReason": "agentrl.rollout.request",
    "RequestState": "agentrl.rollout.request",
    "TOOL_PARSERS": "agentrl.rollout.parsers",
    "ParseResult": "agentrl.rollout.parsers",
    "ParsedCall": "agentrl.rollout.parsers",
    "ToolCallParser": "agentrl.rollout.parsers",
    "get_tool_parser": "agentrl.rollout.parsers",
    "register_tool_parser": "agentrl.rollout.parsers",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
