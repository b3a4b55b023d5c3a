"""Where a value stands in a YAML file: the line of each list entry's key, for error messages.

    entry_key_lines("tools.yaml", "tools", "class_name")   # {0: 2, 1: 9}: entry -> line (1-based)

Plugin configs (tools, interactions) are lists of entries under a top-level key; an error
about entry i names the file and the line of its ``class_name``, so the user goes straight
there. The file is composed (parsed into nodes that remember their position), never
constructed, so reading it runs nothing.
"""

from __future__ import annotations

import os

import yaml


def entry_key_lines(path: str | os.PathLike, list_key: str, key: str) -> dict[int, int]:
    """``{entry index: 1-based line of its key}`` of the list under ``list_key``; entries
    without ``key``, and a file that is not such a YAML, give nothing (never an error)."""
    try:
        with open(path) as f:
            root = yaml.compose(f)
    except (OSError, yaml.YAMLError):
        return {}
    entries = _mapping_value(root, list_key)
    if not isinstance(entries, yaml.SequenceNode):
        return {}
    lines = {}
    for i, entry in enumerate(entries.value):
        node = _mapping_key(entry, key)
        if node is not None:
            lines[i] = node.start_mark.line + 1
    return lines


def _mapping_key(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return key_node
    return None


def _mapping_value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return value
    return None
