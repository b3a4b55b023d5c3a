"""Tests for agentrl/tools/schemas.py: verl-compatible pydantic schema types."""

from agentrl.tools import (
    OpenAIFunctionCallSchema,
    OpenAIFunctionParsedSchema,
    OpenAIFunctionToolSchema,
    ToolResponse,
)

SEARCH_SCHEMA = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search.",
        "parameters": {
            "type": "object",
            "properties": {
                "query_list": {"type": "array", "items": {"type": "string"}, "minItems": 1}
            },
            "required": ["query_list"],
        },
    },
}


def test_schema_round_trip_keeps_extra_json_schema_keywords():
    schema = OpenAIFunctionToolSchema.model_validate(SEARCH_SCHEMA)
    assert schema.function.name == "search"
    assert schema.function.parameters.properties["query_list"].type == "array"
    dumped = schema.model_dump(exclude_none=True)
    assert dumped == {**SEARCH_SCHEMA, "function": {**SEARCH_SCHEMA["function"], "strict": False}}


def test_schema_defaults_match_verl():
    schema = OpenAIFunctionToolSchema.model_validate(
        {"type": "function", "function": {"name": "f"}}
    )
    assert schema.model_dump(exclude_none=True) == {
        "type": "function",
        "function": {
            "name": "f",
            "description": "",
            "parameters": {"type": "object", "properties": {}, "required": []},
            "strict": False,
        },
    }


def test_parsed_call_decodes_arguments():
    call, error = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
        OpenAIFunctionParsedSchema(name="calc", arguments='{"expression": "1+1"}')
    )
    assert (call.name, call.arguments, error) == ("calc", {"expression": "1+1"}, False)


def test_parsed_call_with_bad_json_or_non_object_flags_decode_error():
    for raw in ["{not json", "[1, 2]", '"text"']:
        call, error = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
            OpenAIFunctionParsedSchema(name="calc", arguments=raw)
        )
        assert (call.arguments, error) == ({}, True)


def test_tool_response_fields():
    assert ToolResponse().model_dump() == {"text": None, "image": None, "video": None}
    assert ToolResponse(text="hi").text == "hi"
