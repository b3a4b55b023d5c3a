"""The data types of the tool API: OpenAI function-tool schemas and tool responses.

Field names follow OpenAI's function-calling format and verl's pydantic models, so a verl
tool config and a verl tool port unchanged. JSON-schema keywords beyond the ones named here
(``items``, ``minimum``, ``anyOf`` ...) are kept (``extra="allow"``): the arguments of a call
are validated against the full schema, and the chat template shows the model all of it.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class OpenAIFunctionPropertySchema(BaseModel):
    """One parameter of a function: a JSON schema (``type``, ``description``, ``enum``, ...)."""

    model_config = ConfigDict(extra="allow")

    type: str | list[str] | None = None
    description: str | None = None
    enum: list[Any] | None = None


class OpenAIFunctionParametersSchema(BaseModel):
    """The parameters of a function: a JSON schema of ``type: object``."""

    model_config = ConfigDict(extra="allow")

    type: str = "object"
    properties: dict[str, OpenAIFunctionPropertySchema] = Field(default_factory=dict)
    required: list[str] = Field(default_factory=list)


class OpenAIFunctionSchema(BaseModel):
    """A function the model may call: its name, what it does and its parameters."""

    name: str
    description: str = ""
    parameters: OpenAIFunctionParametersSchema = Field(
        default_factory=OpenAIFunctionParametersSchema
    )
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    """A tool as the OpenAI API and chat templates describe it: ``{"type": "function", ...}``."""

    type: str = "function"
    function: OpenAIFunctionSchema


class OpenAIFunctionParsedSchema(BaseModel):
    """A call as parsed from model text: the arguments are still a JSON string."""

    name: str
    arguments: str


class OpenAIFunctionCallSchema(BaseModel):
    """A call with decoded arguments."""

    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(
        parsed_schema: OpenAIFunctionParsedSchema,
    ) -> tuple[OpenAIFunctionCallSchema, bool]:
        """Decode the arguments; returns ``(call, has_decode_error)``.

        Arguments that are not a JSON object decode to ``{}`` with ``has_decode_error=True``.
        """
        try:
            arguments = json.loads(parsed_schema.arguments)
        except (json.JSONDecodeError, TypeError):
            return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={}), True
        if not isinstance(arguments, dict):
            return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={}), True
        return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments=arguments), False


class OpenAIFunctionToolCall(BaseModel):
    """A tool call in an assistant message (OpenAI chat format)."""

    id: str
    type: str = "function"
    function: OpenAIFunctionCallSchema


class ToolResponse(BaseModel):
    """What a tool returns to the model. Only ``text`` is rendered today.

    ``image`` and ``video`` are placeholders for multi-modal tools (verl's field names).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    text: str | None = None
    image: Any = None
    video: Any = None
