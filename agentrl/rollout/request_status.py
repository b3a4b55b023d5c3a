"""Where a request is, why it ended and what it counted: `AsyncRolloutRequest`'s status.

`RequestState` is the state machine's position (docs/rollout.md, "The state machine"),
`FinishReason` why a COMPLETED (or aborted) trajectory ended, `RequestMetrics` the
per-request counters and latencies that the batch's metrics aggregate
(agentrl/rollout/output.py).
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any


class RequestState(str, Enum):
    """Where a request is in its state machine."""

    PENDING = "pending"
    RUNNING = "running"
    TOOL_CALLING = "tool_calling"
    INTERACTING = "interacting"
    COMPLETED = "completed"
    FAILED = "failed"


class FinishReason(str, Enum):
    """Why a trajectory ended."""

    STOP = "stop"  # the model answered without calling a tool (or the user ended it)
    LENGTH = "length"  # a token budget ran out
    TOOL_CALL = "tool_call"  # a turn limit was reached while the model was calling tools
    ABORT = "abort"  # the backend aborted the generation


@dataclass
class RequestMetrics:
    """Per-request counters and latencies (aggregated into the batch's meta_info)."""

    assistant_turns: int = 0
    user_turns: int = 0  # tool turns + interaction turns
    tool_calls: Counter = field(default_factory=Counter)  # tool name -> calls executed
    tool_errors: Counter = field(default_factory=Counter)  # kind -> count
    parse_errors: int = 0  # calls the parser could not read
    tool_responses_truncated: int = 0
    backend_retries: int = 0
    backend_errors: int = 0  # generation calls that failed for good
    interaction_errors: int = 0
    generation_s: float = 0.0
    tool_s: float = 0.0  # wall time of the tool turns
    interaction_s: float = 0.0
    tokenization: str = "unchecked"  # match | token_drift | strippable_drift | text_drift
    tool_metrics: list[dict] = field(default_factory=list)  # one per executed call

    def as_dict(self) -> dict[str, Any]:
        """The fields as plain values (`asdict`'s answer without its recursive deep copy,
        a share of the loop's time per finished request at 2,048 requests)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["tool_calls"], out["tool_errors"] = dict(self.tool_calls), dict(self.tool_errors)
        out["tool_metrics"] = [copy.deepcopy(m) for m in self.tool_metrics]
        return out
