"""Validation and normalisation of one verl-format dataset row.

A row (docs/data.md, "The row format") holds `prompt` (a list of role/content messages),
`data_source`, `reward_model`, `extra_info` with `tools_kwargs` and
`interaction_kwargs`. Parquet cannot store an empty mapping and fills the keys other rows
have with nulls, so a row read back may lack a kwargs dict, carry `None` for a tool
another row uses, or a null argument that only another row has. Normalising restores what
the writer meant: a missing or null kwargs dict is `{}`, a tool whose entry is null is not
a tool of this row, and a null keyword argument is left out (a tool's own default applies).

Every problem raises `RowError` naming the row, so a broken dataset fails at load with
the index of the first bad row and what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TOOL_KWARGS_KEYS = ("create_kwargs", "execute_kwargs", "calc_reward_kwargs", "release_kwargs")
CHAT_ROLES = ("system", "user", "assistant", "tool")  # a message's roles (also the gateway's)


class RowError(ValueError):
    """A dataset row is malformed; the message names the row and the problem."""


def normalize_messages(value: Any, where: str, prompt_key: str = "prompt") -> list[dict]:
    """The prompt as a list of plain message dicts (null fields from parquet dropped)."""
    if value is None:
        raise RowError(f"{where}: missing '{prompt_key}'")
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise RowError(f"{where}: '{prompt_key}' must be a list of {{'role', 'content'}} "
                       f"messages, got {type(value).__name__}")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, Mapping):
            raise RowError(f"{where}: '{prompt_key}'[{i}] must be a message mapping with "
                           f"'role' and 'content', got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if role not in CHAT_ROLES:
            raise RowError(f"{where}: '{prompt_key}'[{i}] has role {role!r}; "
                           f"expected one of {', '.join(CHAT_ROLES)}")
        if not isinstance(content, str) and not (role == "assistant" and message.get("tool_calls")):
            raise RowError(f"{where}: '{prompt_key}'[{i}] ({role}) must have string 'content', "
                           f"got {type(content).__name__}")
        messages.append({k: _plain(v) for k, v in message.items() if v is not None})
    if not messages:
        raise RowError(f"{where}: '{prompt_key}' is an empty list")
    return messages


def normalize_tools_kwargs(value: Any, where: str) -> dict[str, dict[str, dict]]:
    """`tools_kwargs` as {tool name: {the four kwargs dicts}}, missing parts as {}."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RowError(f"{where}: extra_info.tools_kwargs must be a mapping of tool name to "
                       f"{{create_kwargs, execute_kwargs, calc_reward_kwargs, release_kwargs}}, "
                       f"got {type(value).__name__}")
    result = {}
    for tool_name, entry in value.items():
        if entry is None:  # parquet's fill for a tool that another row uses
            continue
        if not isinstance(entry, Mapping):
            raise RowError(f"{where}: extra_info.tools_kwargs[{tool_name!r}] must be a mapping "
                           f"with keys {', '.join(TOOL_KWARGS_KEYS)}, got {type(entry).__name__}")
        unknown = sorted(set(entry) - set(TOOL_KWARGS_KEYS))
        if unknown:
            raise RowError(f"{where}: extra_info.tools_kwargs[{tool_name!r}] has unknown keys "
                           f"{unknown}; allowed: {', '.join(TOOL_KWARGS_KEYS)}")
        kwargs = {}
        for key in TOOL_KWARGS_KEYS:
            part = entry.get(key)
            if part is not None and not isinstance(part, Mapping):
                raise RowError(f"{where}: extra_info.tools_kwargs[{tool_name!r}][{key!r}] must be "
                               f"a mapping of keyword arguments, got {type(part).__name__}")
            # Parquet fills keys that other rows' kwargs have with null: drop them again.
            kwargs[key] = {k: v for k, v in _plain(part).items() if v is not None} if part else {}
        result[str(tool_name)] = kwargs
    return result


def normalize_interaction_kwargs(value: Any, where: str) -> dict:
    """`interaction_kwargs` as a dict ({} when absent)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RowError(f"{where}: extra_info.interaction_kwargs must be a mapping, "
                       f"got {type(value).__name__}")
    return _plain(value)


def check_row(row: Mapping[str, Any], where: str, prompt_key: str,
              tool_names: set[str] | None) -> None:
    """Raise RowError for the first problem of `row`; `tool_names` are the configured tools."""
    normalize_messages(row.get(prompt_key), where, prompt_key)
    extra_info = row.get("extra_info")
    if extra_info is not None and not isinstance(extra_info, Mapping):
        raise RowError(f"{where}: 'extra_info' must be a mapping, got {type(extra_info).__name__}")
    extra_info = extra_info or {}
    tools_kwargs = normalize_tools_kwargs(extra_info.get("tools_kwargs"), where)
    normalize_interaction_kwargs(extra_info.get("interaction_kwargs"), where)
    if tool_names is not None:
        unknown = sorted(set(tools_kwargs) - tool_names)
        if unknown:
            raise RowError(f"{where}: extra_info.tools_kwargs names tools {unknown} that the tool "
                           f"config does not define (defined: {', '.join(sorted(tool_names))})")


TOOL_SCHEMAS_IN_PROMPT = ("own", "all", "none")


def select_tool_schemas(
    schemas: list[dict], tools_kwargs: Mapping[str, Any], mode: str = "own"
) -> list[dict]:
    """The tool schemas a sample's prompt shows (``multi_turn.tool_schemas_in_prompt``):

    - ``own``: those its `tools_kwargs` names, else all;
    - ``all``: every configured tool;
    - ``none``: no schema in the prompt (a model SFT'd on a short system prompt that names
      its tools itself); the tools still run when the model calls them.

    The dataset and the rollout both use this rule, so the prompt the trainer sees is the
    one the engine generated from.
    """
    if mode not in TOOL_SCHEMAS_IN_PROMPT:
        raise ValueError(
            f"tool_schemas_in_prompt is {mode!r}; choose one of {', '.join(TOOL_SCHEMAS_IN_PROMPT)}"
        )
    if mode == "none":
        return []
    if mode == "all" or not tools_kwargs:
        return list(schemas)
    return [s for s in schemas if s["function"]["name"] in tools_kwargs]


def _plain(value: Any) -> Any:
    """Arrow/numpy containers -> plain dicts and lists (messages and kwargs go to JSON)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ndarray":
        return [_plain(v) for v in value]
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return value.item()
    return value
