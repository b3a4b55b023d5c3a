"""Tool-call parsers: the model's text -> the calls it makes, chosen by `multi_turn.format`.

    parser = get_tool_parser("hermes", tool_schemas)
    result = parser.parse('Let me compute.\\n<tool_call>\\n{"name": "calculator", '
                          '"arguments": {"expression": "2*3"}}\\n</tool_call>')
    result.normal_text   # "Let me compute.\\n"
    result.calls[0]      # ParsedCall(name="calculator", arguments={"expression": "2*3"}, ...)

Registered formats:

- `hermes` (= `qwen25`): `<tool_call>{json}</tool_call>`, any number per turn, with or
  without newlines inside the tags; `arguments` (or `parameters`) is an object or a JSON
  string of one. A final `<tool_call>` left unclosed is accepted when its JSON is complete.
- `llama3_json`: Llama 3.1's JSON calls, `<|python_tag|>{"name": .., "parameters": {..}}`
  or a message that is a JSON object with `name`; several calls separated by `;`.
- `qwen3_coder`: `<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function>
  </tool_call>`; a value is a string when the tool's schema says so, else parsed as JSON
  when it parses.

The engine runs the readable calls and records the turn's message with exactly those as its
`tool_calls` (`ParseResult.message_tool_calls`), whether or not newlines separate them.

A parser only reads syntax. A call it cannot read (bad JSON, no name) comes back with
`error` set, and the engine answers it with an error tool message the model can learn
from; unknown tool names and arguments failing the schema are the engine's checks. Add a
format with `@register_tool_parser("name")` on a `ToolCallParser` subclass.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.utils.registry import Registry

TOOL_PARSERS: Registry[type[ToolCallParser]] = Registry("tool-call parser")


@dataclass
class ParsedCall:
    """One call as the model wrote it; `error` says why it cannot be executed."""

    name: str | None
    arguments: dict[str, Any] | None
    raw: str
    error: str | None = None


def call_id(turn: int, k: int) -> str:
    """The id of the `k`-th readable call of model turn `turn`: the assistant message's
    `tool_calls[k]["id"]` and its tool message's `tool_call_id`."""
    return f"call_{turn}_{k}"


@dataclass
class ParseResult:
    """The text before the first call and the calls, in order."""

    normal_text: str
    calls: list[ParsedCall] = field(default_factory=list)

    def message_tool_calls(self, turn: int) -> list[dict[str, Any]]:
        """The readable calls in OpenAI message form, ids `call_id(turn, k)`: the assistant
        message's `tool_calls`, the same calls the engine runs however they were spaced
        (an unreadable call is answered with an error and is in no message's calls)."""
        readable = [c for c in self.calls if c.error is None]
        return [
            {"id": call_id(turn, k), "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for k, c in enumerate(readable)
        ]  # fmt: skip


class ToolCallParser(ABC):
    """Turns one model turn's text into calls. `tool_schemas` are the OpenAI schemas shown
    to the model (a parser may use them to type values; most ignore them)."""

    def __init__(self, tool_schemas: Sequence[dict] | None = None):
        self.tool_schemas = {s["function"]["name"]: s for s in tool_schemas or ()}

    @abstractmethod
    def parse(self, text: str) -> ParseResult:
        """Every call in `text`; never raises on malformed calls (they carry `error`)."""


def register_tool_parser(name: str) -> Callable[[type[ToolCallParser]], type[ToolCallParser]]:
    """Class decorator registering a parser under `name` (duplicates raise)."""
    return TOOL_PARSERS.register(name)


def get_tool_parser(name: str, tool_schemas: Sequence[dict] | None = None) -> ToolCallParser:
    """A parser of format `name`; an unknown name lists the registered ones."""
    return TOOL_PARSERS.get(name)(tool_schemas)


def call_from_object(obj: Any, raw: str) -> ParsedCall:
    """A call from a decoded `{"name": ..., "arguments"|"parameters": ...}` object."""
    if not isinstance(obj, dict):
        return ParsedCall(
            None,
            None,
            raw,
            f"a tool call must be a JSON object with 'name' and "
            f"'arguments', got a {type(obj).__name__}",
        )
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParsedCall(None, None, raw, "the tool call has no 'name' string")
    arguments = obj.get("arguments", obj.get("parameters"))
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):  # arguments as a JSON string, OpenAI style
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as err:
            return ParsedCall(
                name,
                None,
                raw,
                f"the 'arguments' string of '{name}' is not valid "
                f"JSON ({err.msg} at position {err.pos})",
            )
    if not isinstance(arguments, dict):
        return ParsedCall(
            name,
            None,
            raw,
            f"the 'arguments' of '{name}' must be a JSON object, got {type(arguments).__name__}",
        )
    return ParsedCall(name, arguments, raw)


def _tagged_blocks(
    text: str, start_tag: str, end_tag: str
) -> tuple[str, list[tuple[str, str, bool]]]:
    """`(text before the first block, [(raw block, body, closed)])` of `start...end` blocks."""
    first = text.find(start_tag)
    if first < 0:
        return text, []
    blocks = []
    pos = first
    while (start := text.find(start_tag, pos)) >= 0:
        body_start = start + len(start_tag)
        end = text.find(end_tag, body_start)
        if end < 0:
            blocks.append((text[start:], text[body_start:], False))
            break
        blocks.append((text[start : end + len(end_tag)], text[body_start:end], True))
        pos = end + len(end_tag)
    return text[:first], blocks


@register_tool_parser("hermes")
class HermesToolParser(ToolCallParser):
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, whitespace-tolerant."""

    start_tag, end_tag = "<tool_call>", "</tool_call>"

    def parse(self, text: str) -> ParseResult:
        normal_text, blocks = _tagged_blocks(text, self.start_tag, self.end_tag)
        calls = []
        for raw, body, closed in blocks:
            try:
                obj = json.loads(body)
            except json.JSONDecodeError as err:
                problem = "is not closed with </tool_call>" if not closed else "is not valid JSON"
                calls.append(
                    ParsedCall(
                        None,
                        None,
                        raw,
                        f"the tool call {problem} ({err.msg} at position {err.pos} of its body)",
                    )
                )
                continue
            calls.append(call_from_object(obj, raw))
        return ParseResult(normal_text, calls)


@register_tool_parser("qwen25")
class Qwen25ToolParser(HermesToolParser):
    """Qwen2.5 writes hermes calls with newlines inside the tags; the same parser reads both."""


@register_tool_parser("llama3_json")
class Llama3JsonToolParser(ToolCallParser):
    """Llama 3.1 JSON tool calls, optionally after `<|python_tag|>`, separated by `;`."""

    python_tag = "<|python_tag|>"

    def parse(self, text: str) -> ParseResult:
        tag = text.find(self.python_tag)
        if tag >= 0:
            normal_text, body = text[:tag], text[tag + len(self.python_tag) :]
        elif text.lstrip().startswith("{"):
            normal_text, body = "", text
        else:
            return ParseResult(text, [])
        decoder = json.JSONDecoder()
        calls: list[ParsedCall] = []
        pos = 0
        while True:
            while pos < len(body) and (body[pos].isspace() or body[pos] == ";"):
                pos += 1
            if pos >= len(body):
                break
            try:
                obj, end = decoder.raw_decode(body, pos)
            except json.JSONDecodeError as err:
                calls.append(
                    ParsedCall(
                        None, None, body[pos:], f"the tool call is not valid JSON ({err.msg})"
                    )
                )
                break
            if tag < 0 and not calls and not (isinstance(obj, dict) and "name" in obj):
                return ParseResult(text, [])  # a JSON answer, not a call
            calls.append(call_from_object(obj, body[pos:end]))
            pos = end
        return ParseResult(normal_text, calls)


_FUNCTION_RE = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER_RE = re.compile(
    r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.DOTALL
)


@register_tool_parser("qwen3_coder")
class Qwen3CoderToolParser(ToolCallParser):
    """Qwen3-Coder's XML calls: `<function=NAME>` with one `<parameter=KEY>` per argument."""

    def parse(self, text: str) -> ParseResult:
        normal_text, blocks = _tagged_blocks(text, "<tool_call>", "</tool_call>")
        calls = []
        for raw, body, _closed in blocks:
            match = _FUNCTION_RE.search(body)
            if match is None:
                calls.append(
                    ParsedCall(None, None, raw, "the tool call has no <function=NAME> element")
                )
                continue
            name = match.group(1).strip()
            arguments = {
                key.strip(): self._value(name, key.strip(), value)
                for key, value in _PARAMETER_RE.findall(match.group(2))
            }
            calls.append(ParsedCall(name, arguments, raw))
        return ParseResult(normal_text, calls)

    def _value(self, tool: str, key: str, text: str) -> Any:
        value = text[1:] if text.startswith("\n") else text
        value = value[:-1] if value.endswith("\n") else value
        schema = self.tool_schemas.get(tool, {}).get("function", {}).get("parameters", {})
        declared = schema.get("properties", {}).get(key, {}).get("type")
        if declared == "string" or (isinstance(declared, list) and declared == ["string"]):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
