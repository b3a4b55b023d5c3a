"""Token-exact recording of an agent's chat calls, per session.

A session holds one or more segments. A segment is one growing trajectory: the prompt of
its first call, then for each call the model's exact output ids (loss mask 1, with their
log-probs) and, before the next call, the chat template's delta for the messages the agent
added (tool results, user turns; loss mask 0). The model's own tokens are never
re-tokenized: the next call extends the segment only when its messages are the segment's
messages (the assistant replies exactly as they were returned) plus new ones. A call that
rewrites history (edits, drops or reorders earlier messages, or changes the tools) starts a
new segment; ``rewrites`` counts them.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from agentrl.models.chat import ChatRenderer


def normalize_message(message: dict[str, Any]) -> dict[str, Any]:
    """The parts of an OpenAI chat message that the template renders, in a comparable
    form: role, content (None and "" alike, text parts joined), tool calls (name and parsed
    arguments), tool_call_id and name; the client's extra fields (refusal, audio, ...)
    dropped."""
    content = message.get("content") or ""
    if isinstance(content, list):  # text content parts (the gateway refuses other parts)
        content = "".join(part["text"] for part in content)
    out: dict[str, Any] = {"role": message.get("role"), "content": content}
    calls = message.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [
            {"name": call["function"]["name"],
             "arguments": _arguments(call["function"].get("arguments"))}
            for call in calls
        ]
    for key in ("tool_call_id", "name"):
        if message.get(key):
            out[key] = message[key]
    return out


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A normalized message as the chat template expects it (arguments as objects)."""
    out = {"role": message["role"], "content": message["content"]}
    if message.get("tool_calls"):
        out["tool_calls"] = [{"type": "function", "function": dict(call)}
                             for call in message["tool_calls"]]
    for key in ("tool_call_id", "name"):
        if key in message:
            out[key] = message[key]
    return out


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


@dataclass
class Segment:
    """One trajectory: its tokens, loss mask and log-probs, and the messages behind them."""

    token_ids: list[int]
    prompt_length: int
    tools: list[dict]
    messages: list[dict] = field(default_factory=list)  # normalized, assistant replies included
    loss_mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    weight_versions: list[int] = field(default_factory=list)  # per token; -1: no model's
    pending_suffix: str = ""  # end-of-turn text the model did not write (see ChatRenderer)
    prompt_messages: int = 0  # how many of `messages` the first call's prompt held

    def __post_init__(self) -> None:
        self.loss_mask = self.loss_mask or [0] * len(self.token_ids)
        self.log_probs = self.log_probs or [0.0] * len(self.token_ids)
        self.weight_versions = self.weight_versions or [-1] * len(self.token_ids)

    def append(
        self, ids: list[int], mask: int, log_probs: list[float] | None = None, version: int = -1
    ) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([mask] * len(ids))
        self.log_probs.extend(log_probs if log_probs is not None else [0.0] * len(ids))
        self.weight_versions.extend([version] * len(ids))

    def as_dict(self) -> dict[str, Any]:
        return {"token_ids": list(self.token_ids), "loss_mask": list(self.loss_mask),
                "log_probs": list(self.log_probs), "prompt_length": self.prompt_length}


@dataclass
class Session:
    """What one agent episode produced (see the module docstring)."""

    session_id: str
    segments: list[Segment] = field(default_factory=list)
    reward: float | None = None
    rewrites: int = 0
    # one generation at a time per session; it goes with the session when that is removed
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    def prepare(self, renderer: ChatRenderer, messages: list[dict], tools: list[dict]) -> Segment:
        """The segment the next generation continues: the current one extended by the new
        messages' template delta, or a new one (a rewrite when one existed)."""
        normalized = [normalize_message(m) for m in messages]
        current = self.segments[-1] if self.segments else None
        if (current is not None and tools == current.tools
                and len(normalized) > len(current.messages)
                and normalized[: len(current.messages)] == current.messages):
            new = [template_message(m) for m in normalized[len(current.messages):]]
            text = current.pending_suffix + renderer.delta_text(new)
            current.pending_suffix = ""
            current.append(renderer.encode(text), 0)
            current.messages = normalized
            return current
        if current is not None:
            self.rewrites += 1
        prompt = renderer.prompt_ids([template_message(m) for m in normalized], tools or None)
        segment = Segment(list(prompt), len(prompt), list(tools), normalized,
                          prompt_messages=len(normalized))
        self.segments.append(segment)
        return segment

    def as_dict(self) -> dict[str, Any]:
        return {"trajectories": [s.as_dict() for s in self.segments], "reward": self.reward,
                "rewrites": self.rewrites}


__all__ = ["Segment", "Session", "normalize_message", "template_message"]
