"""Anthropic's Messages API on the gateway: ``POST /sessions/{id}/v1/messages``.

A request is translated into the chat-completions form the gateway serves (so the same
session records the same token-exact trajectory), and the completion back into a Messages
response:

- ``system`` (a string or text blocks) -> a system message; ``messages`` with string or
  block content: ``text`` blocks -> text, an assistant's ``tool_use`` blocks -> its tool
  calls (``id``, ``name``, ``input``), a user's ``tool_result`` blocks -> tool messages
  (``tool_use_id``, text content; ``is_error`` results are prefixed ``Error:``);
- ``tools`` (``name``, ``description``, ``input_schema``) -> function tools; ``tool_choice``
  ``auto`` / ``none``; ``max_tokens`` (required), ``temperature``, ``top_p``,
  ``stop_sequences``, ``stream``;
- the answer: ``content`` blocks (``text``, then one ``tool_use`` per call, ``input`` the
  parsed arguments), ``stop_reason`` ``end_turn`` / ``tool_use`` / ``max_tokens`` /
  ``stop_sequence`` (with ``stop_sequence``), ``usage`` (``input_tokens``,
  ``output_tokens``). With ``stream`` it comes as Anthropic's server-sent events
  (``message_start``, one ``content_block_*`` triple per block, ``message_delta``,
  ``message_stop``).

A ``system``-role message among ``messages`` (Claude Code sends one) is a system message
at its place. Accepted and ignored (what Claude Code sends with every turn; docs/gateway.md's
table says why): ``thinking`` (no thinking blocks are answered: the model's text is the
answer), ``context_management`` (the history is what the client sends), ``output_config``
(``effort``; a ``format`` is not enforced, it only marks a side call: ``is_side_call``),
``metadata``, ``cache_control`` on any block (prefix reuse is the backend's), ``is_error``
``false``, and the URL's ``?beta=true``.

Not supported, refused with a 400 in Anthropic's error shape naming the field: image and
document blocks, server tools, ``tool_choice`` ``any`` / ``tool``, ``top_k``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}


class MessagesRequestError(ValueError):
    """A request the gateway cannot serve: ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def error_body(message: str) -> dict[str, Any]:
    """Anthropic's error shape."""
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def _text_of(content: Any, where: str) -> str:
    """A string, or the text of a list of ``text`` blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MessagesRequestError("content must be a string or a list of blocks", where)
    texts = []
    for k, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise MessagesRequestError(f"only text blocks are supported here, got {kind!r}",
                                       f"{where}[{k}]")
        texts.append(str(block.get("text", "")))
    return "".join(texts)


def _user_messages(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    if not isinstance(content, list):
        raise MessagesRequestError("content must be a string or a list of blocks", where)
    out, texts = [], []
    for k, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise MessagesRequestError("a tool_result needs its tool_use_id",
                                           f"{where}[{k}].tool_use_id")
            result = block.get("content", "")
            text = _text_of(result, f"{where}[{k}].content") if result is not None else ""
            if block.get("is_error"):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
        elif kind == "text":
            texts.append(str(block.get("text", "")))
        else:
            raise MessagesRequestError(f"a user turn's blocks must be text or tool_result, "
                                       f"got {kind!r}", f"{where}[{k}]")
    if texts:  # after the tool results, as the chat form needs them
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _assistant_message(content: Any, where: str) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    if not isinstance(content, list):
        raise MessagesRequestError("content must be a string or a list of blocks", where)
    texts, calls = [], []
    for k, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            if not isinstance(block.get("name"), str) or not isinstance(block.get("id"), str):
                raise MessagesRequestError("a tool_use block needs id and name", f"{where}[{k}]")
            calls.append({"id": block["id"], "type": "function", "function": {
                "name": block["name"], "arguments": json.dumps(block.get("input") or {})}})
        else:
            raise MessagesRequestError(f"an assistant turn's blocks must be text or tool_use, "
                                       f"got {kind!r}", f"{where}[{k}]")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def messages_to_chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions request of a Messages request (MessagesRequestError if the
    gateway cannot serve it)."""
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        raise MessagesRequestError("max_tokens is required: a positive integer", "max_tokens")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise MessagesRequestError("messages must be a non-empty list", "messages")
    if body.get("top_k") is not None:
        raise MessagesRequestError("top_k is not supported", "top_k")
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _text_of(body["system"], "system")})
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            messages += _user_messages(message.get("content"), f"{where}.content")
        elif role == "assistant":
            messages.append(_assistant_message(message.get("content"), f"{where}.content"))
        elif role == "system":  # Claude Code puts one among the turns (its agent list)
            messages.append({"role": "system",
                             "content": _text_of(message.get("content"), f"{where}.content")})
        else:
            raise MessagesRequestError(f"role must be user, assistant or system, got {role!r}",
                                       f"{where}.role")
    tools = []
    for i, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict) or tool.get("type") not in (None, "custom") \
                or not isinstance(tool.get("name"), str):
            raise MessagesRequestError("only custom tools with a name are supported",
                                       f"tools[{i}]")
        tools.append({"type": "function", "function": {
            "name": tool["name"], "description": tool.get("description", ""),
            "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}}})
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else choice
    if kind not in (None, "auto", "none"):
        raise MessagesRequestError("tool_choice must be auto or none here", "tool_choice")
    stops = body.get("stop_sequences") or []
    chat: dict[str, Any] = {
        "model": body.get("model"), "messages": messages, "tools": tools or None,
        "tool_choice": kind, "max_tokens": body["max_tokens"], "stream": False,
        "stop": list(stops) or None,
    }  # fmt: skip
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            chat[key] = body[key]
    return chat


def is_side_call(body: dict[str, Any], episode_has_tools: bool) -> bool:
    """Whether a Messages request is outside the agent's episode: it offers no tools while
    the episode's calls do, or it offers none and asks for structured output
    (``output_config.format``). Claude Code's session-title call is such a call: no tools, a
    JSON-schema format, made before the episode's first turn when
    ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` is unset."""
    if body.get("tools"):
        return False
    output_config = body.get("output_config")
    structured = isinstance(output_config, dict) and output_config.get("format") is not None
    return episode_has_tools or structured


def to_message(completion: dict[str, Any], stop_sequence: str | None) -> dict[str, Any]:
    """The Messages response of a chat completion (``stop_sequence``: the one that ended
    it, if any)."""
    choice = completion["choices"][0]
    message = choice["message"]
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        blocks.append({"type": "tool_use", "id": f"toolu_{call['id'].removeprefix('call_')}",
                       "name": call["function"]["name"],
                       "input": json.loads(call["function"]["arguments"] or "{}")})
    reason = "stop_sequence" if stop_sequence else STOP_REASONS[choice["finish_reason"]]
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
        "model": completion["model"], "content": blocks, "stop_reason": reason,
        "stop_sequence": stop_sequence,
        "usage": {"input_tokens": completion["usage"]["prompt_tokens"],
                  "output_tokens": completion["usage"]["completion_tokens"]},
    }  # fmt: skip


def message_stream_events(message: dict[str, Any]) -> Iterator[str]:
    """The answer as Anthropic's server-sent events (each block whole in one delta)."""

    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 0}}
    yield event("message_start", {"message": start})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield event("content_block_start", {"index": index,
                                                "content_block": {"type": "text", "text": ""}})
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            yield event("content_block_start", {"index": index, "content_block": {
                **block, "input": {}}})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield event("content_block_delta", {"index": index, "delta": delta})
        yield event("content_block_stop", {"index": index})
    yield event("message_delta", {
        "delta": {"stop_reason": message["stop_reason"],
                  "stop_sequence": message["stop_sequence"]},
        "usage": {"output_tokens": message["usage"]["output_tokens"]}})
    yield event("message_stop", {})


__all__ = ["MessagesRequestError", "error_body", "is_side_call", "message_stream_events",
           "messages_to_chat_request", "to_message"]
