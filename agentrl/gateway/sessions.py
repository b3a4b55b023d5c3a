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

A session is a tree: each segment records its ``parent`` (None for the first and for side
calls), its ``branch`` (how it left the parent: ``fork`` or ``spawn``) and its branch point,
``branch_message`` (how many of the parent's messages come before the branch) and
``branch_token`` (how many of the parent's tokens its prompt shares, token for token). A call
extends whichever segment its messages continue (not only the latest), so an agent that
comes back to its thread after a subagent's calls continues its own segment. A new segment
is linked by ``link``:

- ``spawn``: a user message of its prompt past what it shares with any segment holds the
  task of a subagent tool call (``SPAWN_TOOLS``: Claude Code's ``Agent``/``Task``
  ``prompt``, Codex's ``spawn_agent`` ``message``) that no spawned segment took yet: the
  subagent's segment is a child of the segment that made the call, branching after the
  assistant message that holds it (the earliest such call first, so parallel subagents
  each take their own call; Codex's subagent shares the first messages, its instructions
  and environment, with the main thread, Claude Code's none);
- ``fork``: otherwise the segment that shares the longest message prefix with its prompt
  (the messages it keeps); on a tie, the one more of whose assistant messages its prompt
  carries (a compacted history keeps the last turns of the thread it replaces), then one
  with the same tools, then the latest.

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
    branch: str | None = None  # how: "fork" or "spawn" (module docstring); None for a root
    branch_message: int = 0  # the parent's messages before the branch point
    branch_token: int = 0  # the parent's tokens its prompt shares

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
                "parent": self.parent, "branch": self.branch,
                "branch_message": self.branch_message, "branch_token": self.branch_token}


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
    last: int = -1  # the segment of the episode's latest call (index in segments)
    # the Responses API's conversations by response id, for previous_response_id
    responses: dict[str, list[dict]] = field(default_factory=dict, repr=False, compare=False)
    # one generation at a time per session; it goes with the session when that is removed
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    @property
    def episode_tools(self) -> bool:
        """Whether the episode's latest call offered the model tools."""
        return bool(self.segments and self.segments[self.last].tools)

    @property
    def final_segment(self) -> Segment:
        """The segment of the episode's latest call: the thread that ended the episode (a
        subagent's segment may have started after it)."""
        return self.segments[self.last]

    def prepare(self, renderer: ChatRenderer, messages: list[dict], tools: list[dict],
                side: bool = False) -> Segment:  # fmt: skip
        """The segment the next generation continues: the segment whose messages the call's
        continue, extended by the new messages' template delta, or a new one linked into the
        tree (``link``; a fork is counted in ``rewrites``). A ``side`` call (not part of the
        episode) gets a segment of its own in ``side``, and leaves the episode's alone."""
        normalized = [comparable_message(m) for m in messages]
        if side:
            segment = self._new_segment(renderer, normalized, tools)
            self.side.append(segment)
            return segment
        extended = _extended(self.segments, normalized, tools)
        if extended is not None:
            current = self.segments[extended]
            current.append_delta(renderer, [template_message(m)
                                            for m in normalized[len(current.messages):]])
            current.messages = normalized
            self.last = extended
            return current
        segment = self._new_segment(renderer, normalized, tools)
        link(segment, self.segments)
        if segment.branch == "fork":
            self.rewrites += 1
            parent = self.segments[segment.parent]
            fork = first_difference(parent.messages, parent.tools, normalized, tools)
            fork["call"] = self.calls
            self.forks.append(fork)
            logger.warning("gateway session %s: call %d forks from segment %d (a new segment "
                           "starts): %s", self.session_id, self.calls, segment.parent,
                           fork["difference"])
        elif segment.branch == "spawn":
            logger.info("gateway session %s: call %d starts a subagent's segment, a child of "
                        "segment %d after message %d", self.session_id, self.calls,
                        segment.parent, segment.branch_message)
        self.segments.append(segment)
        self.last = len(self.segments) - 1
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


# subagent tools of the agent CLIs, and the argument that holds the subagent's task:
# Claude Code 2.1's Agent (Task before it), Codex's spawn_agent (its multi_agent namespace)
SPAWN_TOOLS = {"Agent": "prompt", "Task": "prompt", "spawn_agent": "message"}


def _extended(segments: list[Segment], messages: list[dict], tools: list[dict]) -> int | None:
    """The index of the segment a call with ``messages`` and ``tools`` continues: its
    messages are a strict prefix of the call's and its tools the same (the longest such
    segment, the latest on a tie); None if none is."""
    found, size = None, -1
    for index, segment in enumerate(segments):
        known = segment.messages
        if (segment.tools == tools and len(messages) > len(known) >= size
                and messages[: len(known)] == known):
            found, size = index, len(known)
    return found


def link(segment: Segment, segments: list[Segment]) -> None:
    """Set a new segment's ``parent``, ``branch`` and branch point among the session's
    ``segments`` (the module docstring): a subagent's ``spawn`` if its prompt holds the task
    of a subagent call not taken yet, else a ``fork`` of the segment it shares most with.
    The first segment stays a root."""
    if not segments:
        return
    prompt = segment.messages[: segment.prompt_messages]
    shared = [_common_prefix(other.messages, prompt) for other in segments]
    spawn = _spawning_call(segments, prompt[max(shared):])
    if spawn is not None:
        segment.parent, segment.branch_message = spawn
        segment.branch = "spawn"
    else:
        def rank(index: int) -> tuple:
            other = segments[index]
            carried = sum(m["role"] == "assistant" and m in other.messages for m in prompt)
            return shared[index], carried, other.tools == segment.tools, index

        segment.parent = max(range(len(segments)), key=rank)
        segment.branch_message = shared[segment.parent]
        segment.branch = "fork"
    segment.branch_token = _common_prefix(segments[segment.parent].input_ids, segment.input_ids)


def _spawning_call(segments: list[Segment], new: list[dict]) -> tuple[int, int] | None:
    """(segment, messages before the branch) of the earliest subagent call (``SPAWN_TOOLS``)
    whose task a user message of ``new`` (the prompt's messages no segment shares) holds
    and that no spawned segment took yet."""
    users = [m["content"] for m in new if m["role"] == "user"]
    taken: dict[tuple[int | None, int], int] = {}
    for child in segments:
        if child.branch == "spawn":
            key = (child.parent, child.branch_message)
            taken[key] = taken.get(key, 0) + 1
    for index, segment in enumerate(segments):
        for at, message in enumerate(segment.messages):
            calls = [call for call in message.get("tool_calls", ())
                     if call["name"] in SPAWN_TOOLS]
            for call in calls[taken.get((index, at + 1), 0):]:
                arguments = call["arguments"] if isinstance(call["arguments"], dict) else {}
                task = arguments.get(SPAWN_TOOLS[call["name"]])
                if isinstance(task, str) and task.strip() and any(
                        task.strip() in text for text in users):
                    return index, at + 1
    return None


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


__all__ = ["SPAWN_TOOLS", "Segment", "Session", "comparable_message", "first_difference", "link",
           "template_message"]
