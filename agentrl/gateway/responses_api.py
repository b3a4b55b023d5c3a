"""OpenAI's Responses API on the gateway: ``POST /sessions/{id}/v1/responses``.

A request is translated into the chat-completions form the gateway serves (so the same
session records the same token-exact trajectory), and the completion back into a response:

- ``instructions`` -> a system message first; ``input``: a string (one user message) or
  items: messages (``role`` user / system / developer / assistant, content a string or
  ``input_text`` / ``output_text`` parts), ``function_call`` (``call_id``, ``name``,
  ``arguments``) -> the assistant's tool calls, ``function_call_output`` (``call_id``,
  ``output``) -> tool messages;
- ``previous_response_id``: the conversation of that response of this session (its input
  and its output) comes first, as OpenAI chains responses (its ``instructions`` are not
  carried over); an id this session never gave is a 400;
- ``tools`` (function tools: ``name``, ``description``, ``parameters``; a ``namespace``
  group's function tools, such as Codex's ``multi_agent_v1`` with its ``spawn_agent``, join
  them under their own names), ``tool_choice`` ``auto`` / ``none``, ``max_output_tokens``,
  ``temperature``, ``top_p``, ``stream``;
- the answer: ``output`` items (a ``message`` with one ``output_text`` part, then one
  ``function_call`` per call, with its ``namespace`` when the tool came from one: Codex runs
  a group's tool only so), ``status`` ``completed`` or ``incomplete``
  (``incomplete_details.reason`` ``max_output_tokens``), ``usage``. With ``stream`` it
  comes as the Responses server-sent events (``response.created``,
  ``response.output_item.added``, text or argument deltas and their ``done`` events,
  ``response.output_item.done``, ``response.completed``).

Accepted and ignored (what the Codex CLI sends with every turn; docs/gateway.md's table):
``store`` (nothing is stored but the session's own record), ``parallel_tool_calls`` (every
call the parser finds is returned), ``reasoning``, ``include``, ``prompt_cache_key``,
``client_metadata``, ``metadata``, ``text``, ``truncation``, ``service_tier``, ``user``; hosted
tools (``IGNORED_TOOLS``) are left out of the prompt.

Not supported, refused with a 400 naming the field: other tool types, image and file
inputs, reasoning items, ``tool_choice`` other than ``auto`` / ``none``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)

# tools the gateway cannot run, accepted and left out of the prompt (the model never sees
# them, so never calls them): OpenAI's hosted tools (Codex sends web_search every turn)
IGNORED_TOOLS = ("web_search", "web_search_preview", "file_search", "computer_use_preview",
                 "code_interpreter", "image_generation", "local_shell", "mcp")
MESSAGE_ROLES = {"user": "user", "system": "system", "developer": "system",
                 "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text")


class ResponsesRequestError(ValueError):
    """A request the gateway cannot serve: ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ResponsesRequestError("content must be a string or a list of text parts", where)
    texts = []
    for k, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ResponsesRequestError(f"only text parts are supported, got {kind!r}",
                                        f"{where}[{k}]")
        texts.append(str(part.get("text", "")))
    return "".join(texts)


def input_messages(items: Any) -> list[dict[str, Any]]:
    """The chat messages of a request's ``input``."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise ResponsesRequestError("input must be a string or a non-empty list of items",
                                    "input")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            role = MESSAGE_ROLES.get(item.get("role"))
            if role is None:
                raise ResponsesRequestError(f"role must be one of {', '.join(MESSAGE_ROLES)}",
                                            f"{where}.role")
            messages.append({"role": role, "content": _text(item.get("content"),
                                                            f"{where}.content")})
        elif kind == "function_call":
            call = {"id": str(item.get("call_id")), "type": "function", "function": {
                "name": str(item.get("name")), "arguments": str(item.get("arguments") or "{}")}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)  # parallel calls of one turn
            elif last is not None and last["role"] == "assistant" and last.get("content"):
                last["tool_calls"] = [call]  # the text and the calls of one turn
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id")),
                             "content": output if isinstance(output, str)
                             else _text(output, f"{where}.output")})
        else:
            raise ResponsesRequestError(f"input items must be messages, function_call or "
                                        f"function_call_output, got {kind!r}", where)
    return messages


def responses_to_chat_request(body: dict[str, Any], history: list[dict[str, Any]]
                              ) -> dict[str, Any]:  # fmt: skip
    """The chat-completions request of a Responses request whose earlier conversation
    (``previous_response_id``'s) is ``history``."""
    messages = list(history)
    if body.get("instructions"):
        messages.insert(0, {"role": "system", "content": str(body["instructions"])})
    messages += input_messages(body.get("input"))
    tools = []
    for i, tool in enumerate(_flat_tools(body.get("tools") or [])):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind in IGNORED_TOOLS:  # hosted tools and groups: left out of the prompt
            logger.debug("responses: tools[%d] of type %r left out of the prompt", i, kind)
            continue
        if kind != "function" or not isinstance(tool.get("name"), str):
            raise ResponsesRequestError(f"only function tools are supported, got {kind!r}",
                                        f"tools[{i}]")
        tools.append({"type": "function", "function": {
            "name": tool["name"], "description": tool.get("description") or "",
            "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}})
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise ResponsesRequestError("tool_choice must be auto or none here", "tool_choice")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages,
                            "tools": tools or None, "tool_choice": choice, "stream": False}
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            chat[key] = body[key]
    return chat


def _flat_tools(tools: list[Any]) -> list[Any]:
    """``tools`` with each ``namespace`` group replaced by its function tools (the client
    runs them: Codex's subagent tools)."""
    flat = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            flat += [{"type": "function", **inner} for inner in tool.get("tools") or []
                     if isinstance(inner, dict) and inner.get("type", "function") == "function"]
        else:
            flat.append(tool)
    return flat


def tool_namespaces(tools: list[Any]) -> dict[str, str]:
    """The namespace of each tool a ``namespace`` group of ``tools`` holds, by tool name."""
    return {inner["name"]: tool["name"] for tool in tools
            if isinstance(tool, dict) and tool.get("type") == "namespace"
            for inner in tool.get("tools") or []
            if isinstance(inner, dict) and isinstance(inner.get("name"), str)}


def to_response(completion: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The Responses answer of a chat completion."""
    choice = completion["choices"][0]
    message = choice["message"]
    output: list[dict[str, Any]] = []
    namespaces = tool_namespaces(body.get("tools") or [])
    if message.get("content"):
        output.append({
            "type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": message["content"], "annotations": []}],
        })  # fmt: skip
    for call in message.get("tool_calls") or []:
        name = call["function"]["name"]
        output.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:24]}",
                       "call_id": call["id"], "name": name,
                       **({"namespace": namespaces[name]} if name in namespaces else {}),
                       "arguments": call["function"]["arguments"], "status": "completed"})
    incomplete = choice["finish_reason"] == "length"
    usage = completion["usage"]
    return {
        "id": f"resp_{uuid.uuid4().hex[:24]}", "object": "response",
        "created_at": int(time.time()), "model": completion["model"],
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None, "output": output,
        "instructions": body.get("instructions"),
        "previous_response_id": body.get("previous_response_id"),
        "tools": body.get("tools") or [], "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": True, "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0), "max_output_tokens": body.get("max_output_tokens"),
        "usage": {"input_tokens": usage["prompt_tokens"],
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": usage["completion_tokens"],
                  "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": usage["total_tokens"]},
    }  # fmt: skip


def conversation_after(request_messages: list[dict[str, Any]], completion: dict[str, Any],
                       instructions: Any) -> list[dict[str, Any]]:
    """What a later ``previous_response_id`` continues from: this request's messages
    (without its instructions) and the answer."""
    messages = list(request_messages)
    if instructions:
        messages = messages[1:]
    return [*messages, dict(completion["choices"][0]["message"])]


def response_stream_events(response: dict[str, Any]) -> Iterator[str]:
    """The answer as the Responses API's server-sent events (each item whole in one delta)."""
    sequence = 0

    def event(kind: str, data: dict[str, Any]) -> str:
        nonlocal sequence
        sequence += 1
        return (f"event: {kind}\n"
                f"data: {json.dumps({'type': kind, 'sequence_number': sequence, **data})}\n\n")

    yield event("response.created", {"response": {**response, "status": "in_progress",
                                                  "output": []}})
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event("response.output_item.added", {"output_index": index, "item": {
                **item, "status": "in_progress", "content": []}})
            part = {"item_id": item["id"], "output_index": index, "content_index": 0}
            yield event("response.content_part.added", {**part, "part": {
                "type": "output_text", "text": "", "annotations": []}})
            yield event("response.output_text.delta", {**part, "delta": text})
            yield event("response.output_text.done", {**part, "text": text})
            yield event("response.content_part.done", {**part, "part": item["content"][0]})
        else:
            yield event("response.output_item.added", {"output_index": index, "item": {
                **item, "status": "in_progress", "arguments": ""}})
            ids = {"item_id": item["id"], "output_index": index}
            yield event("response.function_call_arguments.delta", {**ids,
                                                                   "delta": item["arguments"]})
            yield event("response.function_call_arguments.done", {**ids,
                                                                  "arguments": item["arguments"]})
        yield event("response.output_item.done", {"output_index": index, "item": item})
    yield event("response.completed" if response["status"] == "completed"
                else "response.incomplete", {"response": response})


__all__ = ["ResponsesRequestError", "conversation_after", "input_messages",
           "response_stream_events", "responses_to_chat_request", "to_response",
           "tool_namespaces"]
