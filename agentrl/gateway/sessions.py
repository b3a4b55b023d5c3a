"""Token-exact recording of an agent's chat calls, per session.

A session holds one or more segments. A segment is one growing trajectory: the prompt of
its first call, then for each call the model's exact output ids (loss mask 1, with their
log-probs) and, before the next call, the chat template's delta for the messages the agent
added (tool results, user turns; loss mask 0). The model's own tokens are never
re-tokenized: the next call extends the segment only when its messages are the segment's
messages (the assistant replies exactly as they were returned) plus new ones. A call that
rewrites history (edits, drops or reorders earlier messages, or changes the tools) is a
fork: it starts a new segment, ``rewrites`` counts it and ``forks`` keeps where it left the
recorded history (the first differing message, logged as a warning).

A session is a tree: each segment records its ``parent`` (the index of the segment whose
history it shares the longest message prefix with; None for the first and for side calls)
and its branch point, ``branch_message`` (how many of the parent's messages it keeps) and
``branch_token`` (how many of the parent's tokens its prompt shares, token for token).

Calls that are not part of the episode (a CLI's title generation: see
agentrl/gateway/anthropic_api.py ``is_side_call``) are recorded apart, one segment each in
``side``: they neither extend nor fork the episode, and are not trained.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.trajectory import TokenTrajectory

logger = logging.getLogger(__name__)


def comparable_message(message: dict[str, Any]) -> dict[str, Any]:
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
class Segment(TokenTrajectory):
    """One recorded trajectory (its token lists: `TokenTrajectory`, the same type as the
    engine's requests) and the messages behind them."""

    prompt_length: int
    tools: list[dict]
    messages: list[dict] = field(default_factory=list)  # normalized, assistant replies included
    prompt_messages: int = 0  # how many of `messages` the first call's prompt held
    parent: int | None = None  # the segment it branched from (index in the session's segments)
    branch_message: int = 0  # the parent's messages it keeps
    branch_token: int = 0  # the parent's tokens its prompt shares

    def branch_from(self, parents: list[Segment]) -> None:
        """Set ``parent`` and the branch point: the segment of ``parents`` that shares the
        longest message prefix with this one's prompt (the latest on a tie), and the
        tokens the two share from the start."""
        best, keep = None, -1
        for index, other in enumerate(parents):
            shared = _common_prefix(other.messages, self.messages[: self.prompt_messages])
            if shared >= keep:
                best, keep = index, shared
        if best is None:
            return
        self.parent, self.branch_message = best, keep
        self.branch_token = _common_prefix(parents[best].input_ids, self.input_ids)

    @property
    def policy_tokens(self) -> int:
        """The model's own tokens (loss mask 1)."""
        return sum(self.loss_mask)

    @classmethod
    def from_prompt(cls, prompt_ids: list[int], tools: list[dict], messages: list[dict]) -> Segment:
        """A segment whose tokens are the rendered prompt of `messages` (loss mask 0)."""
        segment = cls(prompt_length=len(prompt_ids), tools=list(tools), messages=messages,
                      prompt_messages=len(messages))  # fmt: skip
        segment.append(list(prompt_ids), 0)
        return segment

    @property
    def token_ids(self) -> list[int]:
        return self.input_ids

    def as_dict(self) -> dict[str, Any]:
        return {"token_ids": list(self.input_ids), "loss_mask": list(self.loss_mask),
                "log_probs": list(self.rollout_log_probs),
                "weight_versions": list(self.weight_versions), "prompt_length": self.prompt_length,
                "parent": self.parent, "branch_message": self.branch_message,
                "branch_token": self.branch_token}


@dataclass
class Session:
    """What one agent episode produced (see the module docstring)."""

    session_id: str
    segments: list[Segment] = field(default_factory=list)
    reward: float | None = None
    rewrites: int = 0  # forks: calls that started a new segment
    calls: int = 0  # the episode's model calls so far: the k of its call id {session_id}-t{k}-a0
    forks: list[dict] = field(default_factory=list)  # where each fork left (first_difference)
    side: list[Segment] = field(default_factory=list)  # calls outside the episode, one each
    # the Responses API's conversations by response id, for previous_response_id
    responses: dict[str, list[dict]] = field(default_factory=dict, repr=False, compare=False)
    # one generation at a time per session; it goes with the session when that is removed
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    @property
    def episode_tools(self) -> bool:
        """Whether the episode's current segment offers the model tools."""
        return bool(self.segments and self.segments[-1].tools)

    def prepare(self, renderer: ChatRenderer, messages: list[dict], tools: list[dict],
                side: bool = False) -> Segment:  # fmt: skip
        """The segment the next generation continues: the current one extended by the new
        messages' template delta, or a new one (a fork, counted in ``rewrites``, when one
        existed). A ``side`` call (not part of the episode) gets a segment of its own in
        ``side``, and leaves the episode's segments alone."""
        normalized = [comparable_message(m) for m in messages]
        if side:
            segment = self._new_segment(renderer, normalized, tools)
            self.side.append(segment)
            return segment
        current = self.segments[-1] if self.segments else None
        if (current is not None and tools == current.tools
                and len(normalized) > len(current.messages)
                and normalized[: len(current.messages)] == current.messages):
            current.append_delta(renderer, [template_message(m)
                                            for m in normalized[len(current.messages):]])
            current.messages = normalized
            return current
        if current is not None:
            self.rewrites += 1
            fork = first_difference(current.messages, current.tools, normalized, tools)
            fork["call"] = self.calls
            self.forks.append(fork)
            logger.warning("gateway session %s: call %d forks from the recorded segment "
                           "(a new segment starts): %s", self.session_id, self.calls,
                           fork["difference"])
        segment = self._new_segment(renderer, normalized, tools)
        segment.branch_from(self.segments)
        self.segments.append(segment)
        return segment

    @staticmethod
    def _new_segment(renderer: ChatRenderer, normalized: list[dict],
                     tools: list[dict]) -> Segment:  # fmt: skip
        prompt = renderer.prompt_ids([template_message(m) for m in normalized], tools or None)
        return Segment.from_prompt(prompt, tools, normalized)

    def as_dict(self) -> dict[str, Any]:
        return {"trajectories": [s.as_dict() for s in self.segments], "reward": self.reward,
                "rewrites": self.rewrites, "forks": list(self.forks),
                "side_calls": [s.as_dict() for s in self.side]}


def first_difference(recorded: list[dict], recorded_tools: list[dict], sent: list[dict],
                     sent_tools: list[dict]) -> dict[str, Any]:
    """Where a call's history leaves the recorded segment: ``message`` (the index of the
    first differing message, None when the tools differ), the ``recorded`` and ``sent``
    message there (None past an end) and a sentence saying it (``difference``)."""
    if sent_tools != recorded_tools:
        return {"message": None, "recorded": None, "sent": None,
                "difference": f"the tools differ ({len(recorded_tools)} recorded, "
                              f"{len(sent_tools)} sent)"}
    index = next((i for i, (a, b) in enumerate(zip(recorded, sent, strict=False)) if a != b),
                 min(len(recorded), len(sent)))
    old = recorded[index] if index < len(recorded) else None
    new = sent[index] if index < len(sent) else None
    if old is not None and new is None:
        text = (f"the call sends {len(sent)} messages, a prefix of the {len(recorded)} "
                "recorded (nothing new to answer)")
    else:
        text = f"message {index} differs: recorded {_short(old)}, sent {_short(new)}"
    return {"message": index, "recorded": old, "sent": new, "difference": text}


def _common_prefix(a: list, b: list) -> int:
    """How many leading items ``a`` and ``b`` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def _short(message: dict | None, limit: int = 200) -> str:
    text = json.dumps(message, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


__all__ = ["Segment", "Session", "comparable_message", "first_difference", "template_message"]
