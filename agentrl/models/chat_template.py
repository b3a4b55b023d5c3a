"""The Qwen2.5-style chat template the tiny offline models ship with.

It renders the conversation exactly like Qwen2.5-Instruct's template (its
`tokenizer_config.json`, as SGLang applies it): OpenAI tool schemas in the system turn,
assistant tool calls as `<tool_call>\\n{json}\\n</tool_call>`, and consecutive `tool`
messages merged into one user turn of `<tool_response>` blocks. It departs from
Qwen2.5 in two places, both on purpose:

- the default system prompt is "You are a helpful assistant." (Qwen2's wording);
- a tool call whose `arguments` is already a JSON string is written as-is instead of
  being double-encoded (Qwen3's `is string` check), so callers may pass either form.

`COMPACT_TOOLS_CHAT_TEMPLATE` is the same template with one difference: the tools are
listed in the system turn as one short line, `Tools: calculator(expression)`, instead of
Qwen2.5's preamble and JSON schemas (~250 tokens). The CPU quickstart's model uses it: a
tiny model on CPU pays for every prompt token at every SFT and RL step (~2.3x per step with
the full schemas), and a model trained from scratch needs no schema to know its one tool.
"""

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

# How the tools are written into the system turn, after the system prompt.
_QWEN25_TOOLS = (
    "{{- " + repr(TOOLS_PREAMBLE) + " }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- " + repr(TOOLS_POSTAMBLE) + " }}"
)
_COMPACT_TOOLS = (
    "{{- '\\nTools: ' }}"
    "{%- for tool in tools %}{%- set fn = tool.function if tool.function is defined else tool %}"
    "{{- fn.name + '(' + (fn.parameters.properties | list | join(', ')) + ')' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}"
)


def _chat_template(tools_block: str) -> str:
    return (
        "{%- if tools %}"
        "{{- '<|im_start|>system\\n' }}"
        "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
        "{%- else %}{{- '" + DEFAULT_SYSTEM_PROMPT + "' }}{%- endif %}"
        + tools_block
        + "{{- '<|im_end|>\\n' }}"
        "{%- else %}"
        + _MESSAGES
    )


_MESSAGES = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

QWEN25_CHAT_TEMPLATE = _chat_template(_QWEN25_TOOLS)
COMPACT_TOOLS_CHAT_TEMPLATE = _chat_template(_COMPACT_TOOLS)
CHAT_TEMPLATES = {"qwen25": QWEN25_CHAT_TEMPLATE, "compact_tools": COMPACT_TOOLS_CHAT_TEMPLATE}
