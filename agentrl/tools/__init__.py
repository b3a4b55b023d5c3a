"""Tools the model calls during a rollout: the plugin API, the config loader and helpers.

    from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse
    from agentrl.tools import InfraError      # raise it when your service, not the model, failed

A verl tool ports by changing these imports. See docs/tools.md for the lifecycle, the
tool YAML format and how a dataset's ``tools_kwargs`` reach each method.
"""

from agentrl.tools.base import BaseTool
from agentrl.tools.execution import execute_tool_call, validate_arguments
from agentrl.tools.loader import ToolConfigError, load_tool_schemas, load_tools
from agentrl.tools.record_replay import RecordReplayTool, wrap_tools
from agentrl.tools.schemas import (
    OpenAIFunctionCallSchema,
    OpenAIFunctionParametersSchema,
    OpenAIFunctionParsedSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolCall,
    OpenAIFunctionToolSchema,
    ToolResponse,
)
from agentrl.utils.infra import InfraError

__all__ = [
    "BaseTool",
    "InfraError",
    "OpenAIFunctionCallSchema",
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionParsedSchema",
    "OpenAIFunctionPropertySchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolCall",
    "OpenAIFunctionToolSchema",
    "RecordReplayTool",
    "ToolConfigError",
    "ToolResponse",
    "execute_tool_call",
    "load_tool_schemas",
    "load_tools",
    "validate_arguments",
    "wrap_tools",
]
