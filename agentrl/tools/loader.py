"""Read a tool config (verl's YAML format) into tool objects or into the schemas alone.

    tools:
      - class_name: tools.calculator.CalculatorTool     # or path/to/file.py:ClassName
        config: {type: native, timeout: 5}
        tool_schema: {type: function, function: {name: calculator, ...}}

``load_tools`` imports and builds every tool; ``load_tool_schemas`` returns the OpenAI schema
dicts without importing anything (the dataset renders prompts with them). An entry of
``type: mcp`` (a Model Context Protocol server, agentrl/tools/mcp.py) stands for every tool
of that server: both functions ask the server for its tools. Both validate the
same way and raise ``ToolConfigError`` naming the entry (its index and ``class_name``).
A relative ``path/to/file.py`` in ``class_name`` is looked up in the current directory, then
next to the YAML file. ``import_tool_classes`` validates and imports every class without
building a tool or starting a server, each error naming the YAML file and the line of the
entry's ``class_name`` (what a run checks before its workers start).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from pydantic import ValidationError

from agentrl.plugins import PluginLoadError, load_object
from agentrl.tools.base import BaseTool
from agentrl.tools.schemas import OpenAIFunctionToolSchema
from agentrl.utils.plain_config import plain_container
from agentrl.utils.yaml_lines import entry_key_lines

logger = logging.getLogger(__name__)

# OpenAI's rule for function names.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

ToolConfigSource = str | os.PathLike | Sequence[Mapping] | Mapping


class ToolConfigError(ValueError):
    """A tool config entry is malformed, cannot be loaded, or clashes with another."""


def _read_entries(source: ToolConfigSource) -> tuple[list[Any], Path | None]:
    """The raw list of entries and the directory relative file paths resolve against."""
    source = plain_container(source)
    base_dir = None
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise ToolConfigError(f"tool config file not found: {path}")
        with path.open() as f:
            try:
                source = yaml.safe_load(f)
            except yaml.YAMLError as err:
                raise ToolConfigError(f"tool config {path} is not valid YAML: {err}") from err
        base_dir = path.resolve().parent
        if source is None:
            return [], base_dir
    if isinstance(source, Mapping):
        if "tools" not in source:
            raise ToolConfigError("tool config must have a top-level 'tools:' list")
        source = source["tools"] or []
    if isinstance(source, str | bytes) or not isinstance(source, Sequence):
        raise ToolConfigError(f"'tools' must be a list of entries, got {type(source).__name__}")
    return list(source), base_dir


def _entry_label(index: int, entry: Any) -> str:
    class_name = entry.get("class_name") if isinstance(entry, Mapping) else None
    return f"tool config entry {index} (class_name {class_name!r})"


def _parse_entry(index: int, entry: Any) -> tuple[str, dict, OpenAIFunctionToolSchema]:
    """Validate one entry; returns (class_name, config, schema)."""
    label = _entry_label(index, entry)
    if not isinstance(entry, Mapping):
        raise ToolConfigError(f"{label}: must be a mapping, got {type(entry).__name__}")
    unknown = set(entry) - {"class_name", "config", "tool_schema"}
    if unknown:
        raise ToolConfigError(f"{label}: unknown keys {sorted(unknown)}")
    class_name = entry.get("class_name")
    if not isinstance(class_name, str) or not class_name:
        raise ToolConfigError(f"{label}: 'class_name' must be a non-empty string")
    config = entry.get("config") or {}
    if not isinstance(config, Mapping):
        raise ToolConfigError(f"{label}: 'config' must be a mapping")
    if config.get("type", "native") != "native":
        raise ToolConfigError(
            f"{label}: config.type {config['type']!r} is not supported (only 'native')"
        )
    if "tool_schema" not in entry:
        raise ToolConfigError(f"{label}: 'tool_schema' is missing")
    try:
        schema = OpenAIFunctionToolSchema.model_validate(entry["tool_schema"])
    except ValidationError as err:
        raise ToolConfigError(f"{label}: invalid tool_schema: {err}") from err
    _check_schema(label, schema)
    return class_name, dict(config), schema


def _check_schema(label: str, schema: OpenAIFunctionToolSchema) -> None:
    function = schema.function
    if not _NAME_RE.match(function.name):
        raise ToolConfigError(
            f"{label}: function name {function.name!r} must be 1-64 characters of "
            "letters, digits, '_' or '-'"
        )
    parameters = function.parameters.model_dump(exclude_none=True)
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        raise ToolConfigError(
            f"{label}: parameters of {function.name!r} are not a valid JSON schema "
            f"at {where}: {err.message}"
        ) from err
    missing = [
        name for name in function.parameters.required if name not in function.parameters.properties
    ]
    if missing:
        logger.warning("%s: required parameters %s are not in 'properties'", label, missing)


def _expand_mcp(entries: list[Any]) -> list[Any]:
    """``type: mcp`` entries as one native entry per tool of the server (agentrl/tools/mcp.py:
    the server is asked for its tools here)."""
    out: list[Any] = []
    for i, entry in enumerate(entries):
        if not (isinstance(entry, Mapping) and entry.get("type") == "mcp"):
            out.append(entry)
            continue
        from agentrl.tools.mcp import mcp_entries

        label = f"tool config entry {i} (type mcp)"
        try:
            expanded = mcp_entries(label, dict(entry))
        except (ImportError, ValueError) as err:
            raise ToolConfigError(str(err)) from err
        except Exception as err:  # the server did not start or answer
            raise ToolConfigError(f"{label}: listing the server's tools failed: "
                                  f"{type(err).__name__}: {err}") from err
        out.extend({"class_name": cls, "config": config, "tool_schema": schema}
                   for cls, config, schema in expanded)
    return out


def _parse_all(
    source: ToolConfigSource,
) -> tuple[list[tuple[str, dict, OpenAIFunctionToolSchema]], Path | None]:
    entries, base_dir = _read_entries(source)
    entries = _expand_mcp(entries)
    parsed = [_parse_entry(i, entry) for i, entry in enumerate(entries)]
    seen: dict[str, int] = {}
    for i, (_, _, schema) in enumerate(parsed):
        name = schema.function.name
        if name in seen:
            raise ToolConfigError(
                f"{_entry_label(i, entries[i])}: tool name {name!r} is already used by "
                f"entry {seen[name]} (class_name {parsed[seen[name]][0]!r})"
            )
        seen[name] = i
    return parsed, base_dir


def load_tool_schemas(source: ToolConfigSource) -> list[dict[str, Any]]:
    """The OpenAI tool schema dicts of a tool config, in order, without importing the tools."""
    parsed, _ = _parse_all(source)
    return [schema.model_dump(exclude_none=True) for _, _, schema in parsed]


def import_tool_classes(path: str | os.PathLike) -> list[type[BaseTool]]:
    """Validate the tool config file ``path`` and import each entry's class, building no
    tool; ``type: mcp`` entries are left out (listing their tools starts the server). A
    problem raises ``ToolConfigError`` that begins with ``FILE, line N:`` (the line of the
    entry's ``class_name``)."""
    entries, base_dir = _read_entries(path)
    lines = entry_key_lines(path, "tools", "class_name")
    classes = []
    for i, entry in enumerate(entries):
        if isinstance(entry, Mapping) and entry.get("type") == "mcp":
            continue
        where = f"{path}, line {lines[i]}: " if i in lines else f"{path}: "
        try:
            class_name, _, _ = _parse_entry(i, entry)
        except ToolConfigError as err:
            raise ToolConfigError(f"{where}{err}") from err
        try:
            classes.append(load_object(class_name, BaseTool, base_dir=base_dir))
        except PluginLoadError as err:
            raise ToolConfigError(f"{where}{_entry_label(i, entry)}: {err}") from err
    return classes


def load_tools(source: ToolConfigSource) -> dict[str, BaseTool]:
    """Import and build every tool of a tool config; returns ``{name: tool}`` in config order.

    Args:
        source: a YAML file path, a mapping with a ``tools`` list, or the list itself.
    """
    parsed, base_dir = _parse_all(source)
    tools: dict[str, BaseTool] = {}
    for i, (class_name, config, schema) in enumerate(parsed):
        label = f"tool config entry {i} (class_name {class_name!r})"
        try:
            cls = load_object(class_name, BaseTool, base_dir=base_dir)
        except PluginLoadError as err:
            raise ToolConfigError(f"{label}: {err}") from err
        try:
            tool = cls(config=config, tool_schema=schema)
        except Exception as err:
            raise ToolConfigError(
                f"{label}: constructing the tool raised {type(err).__name__}: {err}"
            ) from err
        if tool.name in tools:
            raise ToolConfigError(f"{label}: tool name {tool.name!r} is used twice")
        tools[tool.name] = tool
    logger.info("loaded tools: %s", ", ".join(tools) or "(none)")
    return tools
