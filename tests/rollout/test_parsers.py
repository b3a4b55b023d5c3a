"""Tool-call parsers: every format, several calls per turn, malformed calls as errors."""

from __future__ import annotations

import json

import pytest

from agentrl.rollout.parsers import (
    TOOL_PARSERS,
    HermesToolParser,
    ParsedCall,
    ParseResult,
    ToolCallParser,
    call_id,
    get_tool_parser,
    register_tool_parser,
)
from agentrl.utils.registry import UnknownNameError

SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
            },
        },
    },
]


def test_registry_names_and_unknown_format():
    assert TOOL_PARSERS.names() == ["hermes", "llama3_json", "qwen25", "qwen3_coder"]
    with pytest.raises(UnknownNameError, match="unknown tool-call parser 'xml'; valid: hermes"):
        get_tool_parser("xml")


def test_user_registered_parser_is_found_by_name():
    @register_tool_parser("test_semicolon")
    class Semicolon(ToolCallParser):
        def parse(self, text: str) -> ParseResult:
            name, _, arg = text.partition(";")
            return ParseResult("", [ParsedCall(name, {"x": arg}, text)])

    try:
        result = get_tool_parser("test_semicolon").parse("calc;1+1")
        assert result.calls == [ParsedCall("calc", {"x": "1+1"}, "calc;1+1")]
    finally:
        TOOL_PARSERS.unregister("test_semicolon")


@pytest.mark.parametrize("fmt", ["hermes", "qwen25"])
def test_hermes_several_calls_with_and_without_newlines(fmt):
    text = (
        'Let me look.\n<tool_call>\n{"name": "search", "arguments": {"query": "a b"}}\n'
        '</tool_call>\n<tool_call>{"name":"search","arguments":"{\\"query\\": \\"c\\"}"}'
        "</tool_call>"
    )
    result = get_tool_parser(fmt).parse(text)
    assert result.normal_text == "Let me look.\n"
    assert [(c.name, c.arguments, c.error) for c in result.calls] == [
        ("search", {"query": "a b"}, None),
        ("search", {"query": "c"}, None),
    ]
    assert result.calls[0].raw == (
        '<tool_call>\n{"name": "search", "arguments": {"query": "a b"}}\n</tool_call>'
    )


@pytest.mark.parametrize("between", ["", "\n", " and ", "<tool_call>{oops</tool_call>"])
def test_back_to_back_calls_are_the_messages_tool_calls(between):
    """Calls with no newline between them (or text, or an unreadable call) are calls, and
    the message's tool_calls are the readable ones in order, ids numbering them as the
    engine's tool messages do (`call_id`)."""
    first = '<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call>'
    second = '<tool_call>\n{"name": "search", "arguments": {"query": "b", "k": 2}}\n</tool_call>'
    result = get_tool_parser("hermes").parse("Two.\n" + first + between + second)
    readable = [c for c in result.calls if c.error is None]
    assert [(c.name, c.arguments) for c in readable] == [
        ("search", {"query": "a"}), ("search", {"query": "b", "k": 2})]  # fmt: skip
    assert len(result.calls) == 2 + ("oops" in between)
    assert result.normal_text == "Two.\n"
    assert result.message_tool_calls(3) == [
        {"id": call_id(3, 0), "type": "function",
         "function": {"name": "search", "arguments": {"query": "a"}}},
        {"id": call_id(3, 1), "type": "function",
         "function": {"name": "search", "arguments": {"query": "b", "k": 2}}}]  # fmt: skip
    assert call_id(3, 1) == "call_3_1"
    assert ParseResult("text").message_tool_calls(1) == []


def test_hermes_no_call_returns_the_text():
    assert HermesToolParser().parse("just text") == ParseResult("just text", [])


def test_hermes_parameters_key_and_missing_arguments():
    result = HermesToolParser().parse(
        '<tool_call>{"name": "a", "parameters": {"x": 1}}'
        '</tool_call><tool_call>{"name": "b"}</tool_call>'
    )
    assert [(c.name, c.arguments) for c in result.calls] == [("a", {"x": 1}), ("b", {})]


@pytest.mark.parametrize(
    "body, message",
    [
        ('{"name": "a", "arguments": {"x": 1}', "is not valid JSON (Expecting ',' delimiter"),
        ('["a"]', "must be a JSON object with 'name' and 'arguments', got a list"),
        ('{"arguments": {}}', "has no 'name' string"),
        ('{"name": "a", "arguments": "{oops"}', "the 'arguments' string of 'a' is not valid JSON"),
        (
            '{"name": "a", "arguments": [1]}',
            "the 'arguments' of 'a' must be a JSON object, got list",
        ),
    ],
)
def test_hermes_malformed_calls_carry_an_error(body, message):
    result = HermesToolParser().parse(f"x<tool_call>{body}</tool_call>")
    assert len(result.calls) == 1
    assert message in result.calls[0].error
    assert result.calls[0].raw == f"<tool_call>{body}</tool_call>"


def test_hermes_unclosed_final_call():
    ok = HermesToolParser().parse('<tool_call>\n{"name": "a", "arguments": {}}\n')
    assert (ok.calls[0].name, ok.calls[0].error) == ("a", None)
    cut = HermesToolParser().parse('<tool_call>\n{"name": "a", "argu')
    assert "is not closed with </tool_call>" in cut.calls[0].error


def test_llama3_json_python_tag_and_semicolons():
    text = (
        '<|python_tag|>{"name": "search", "parameters": {"query": "x"}}; '
        '{"name": "search", "parameters": {"query": "y"}}'
    )
    result = get_tool_parser("llama3_json").parse(text)
    assert result.normal_text == ""
    assert [c.arguments for c in result.calls] == [{"query": "x"}, {"query": "y"}]


def test_llama3_json_plain_text_and_json_answers_are_not_calls():
    parser = get_tool_parser("llama3_json")
    assert parser.parse("The answer is 4.").calls == []
    assert parser.parse('{"answer": 4}').calls == []
    bad = parser.parse('<|python_tag|>{"name": "search", "parameters": ')
    assert bad.calls[0].error.startswith("the tool call is not valid JSON")


def test_qwen3_coder_types_values_by_schema():
    text = (
        "Searching.\n<tool_call>\n<function=search>\n<parameter=query>\n42\n</parameter>\n"
        "<parameter=k>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    result = get_tool_parser("qwen3_coder", SCHEMAS).parse(text)
    assert result.normal_text == "Searching.\n"
    assert result.calls[0].name == "search"
    assert result.calls[0].arguments == {"query": "42", "k": 3}  # string by schema, int by JSON


def test_qwen3_coder_without_function_is_an_error():
    result = get_tool_parser("qwen3_coder").parse("<tool_call>{}</tool_call>")
    assert result.calls[0].error == "the tool call has no <function=NAME> element"


def test_non_ascii_and_escapes_roundtrip():
    args = {"query": 'naïve "quoted"\n\tcafé 中文 🙂'}
    text = (
        "<tool_call>\n"
        + json.dumps({"name": "search", "arguments": args}, ensure_ascii=False)
        + "\n</tool_call>"
    )
    assert HermesToolParser().parse(text).calls[0].arguments == args
