"""A fast validity check for the flat argument schemas most tools have.

Validating a call's arguments with ``jsonschema`` costs ~0.15 ms, most of it walking the
validator's keyword machinery; at thousands of tool calls per step that is a measurable
share of the rollout's event loop (issue 18). Most tool schemas are flat: an object whose
properties are typed scalars, some required, maybe an ``enum`` or ``additionalProperties:
false``. ``flat_check(schema)`` returns a function that decides, for such a schema, whether
an arguments dict is valid exactly as Draft 2020-12 ``jsonschema`` would; for any other
schema it returns None and the caller keeps using ``jsonschema``. The caller still asks
``jsonschema`` for the wording of an error, so only valid calls take the fast path.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

# keywords that never change validity (annotations)
ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "$schema",
                         "deprecated", "readOnly", "writeOnly"})
SCALARS = (str, int, float, bool, type(None))


def _is_type(value: Any, name: str) -> bool:
    """jsonschema's Draft 2020-12 type check for one JSON type name."""
    if name == "string":
        return isinstance(value, str)
    if name == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, numbers.Number) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    raise ValueError(name)


def _in_enum(value: Any, enum: list) -> bool:
    # jsonschema's equality: booleans never equal numbers; 1 == 1.0
    return any(value == e and isinstance(value, bool) == isinstance(e, bool) for e in enum)


def _property_check(prop: Any) -> Callable[[Any], bool] | None:
    if not isinstance(prop, dict) or not set(prop) <= ANNOTATIONS | {"type", "enum"}:
        return None
    types = prop.get("type")
    if types is None:
        types = []
    elif isinstance(types, str):
        types = [types]
    valid_names = {"string", "integer", "number", "boolean", "null", "object", "array"}
    if not isinstance(types, list) or not all(t in valid_names for t in types):
        return None
    enum = prop.get("enum")
    if enum is not None and (not isinstance(enum, list)
                             or not all(isinstance(e, SCALARS) for e in enum)):
        return None

    def check(value: Any) -> bool:
        if types and not any(_is_type(value, t) for t in types):
            return False
        return enum is None or _in_enum(value, enum)

    return check


def flat_check(schema: Any) -> Callable[[dict], bool] | None:
    """The fast validity check of a flat object schema, or None (see the module docstring)."""
    allowed = ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}
    if not isinstance(schema, dict) or not set(schema) <= allowed:
        return None
    if schema.get("type", "object") != "object":
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(extra, bool):
        return None
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    checks = {name: _property_check(prop) for name, prop in properties.items()}
    if any(check is None for check in checks.values()):
        return None

    def check(arguments: dict) -> bool:
        if not all(name in arguments for name in required):
            return False
        for name, value in arguments.items():
            prop = checks.get(name)
            if prop is None:
                if not extra:
                    return False
            elif not prop(value):
                return False
        return True

    return check


__all__ = ["flat_check"]
