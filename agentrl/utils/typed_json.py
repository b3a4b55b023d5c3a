"""JSON that gives back the Python value it was made from, types included.

    text = dumps({"grid": ((0, 1), (1, 0)), "colors": {3: "red"}, "p": Fraction(1, 3)})
    loads(text) == {"grid": ((0, 1), (1, 0)), "colors": {3: "red"}, "p": Fraction(1, 3)}

Plain JSON keeps a tuple as a list and a dict's int keys as strings, so a value that a
scorer compares with `==` (a reasoning-gym item's metadata) stops being what it was. Here a
value JSON cannot hold is an object with one tag key:

    {"$tuple": [...]}  {"$set": [...]}  {"$frozenset": [...]}  {"$dict": [[key, value], ...]}
    {"$fraction": "1/3"}  {"$decimal": "0.10"}  {"$complex": [re, im]}
    {"$numpy": ["float64", 0.5]}  (a numpy scalar: its dtype and value)

A dict is written as a JSON object when its keys are all strings and none is a tag;
otherwise as `$dict`. Plain JSON (no tags) loads as `json.loads` loads it. A value of any
other type is a TypeError naming where it is, never a silent `str()`.
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from typing import Any

_TAGS = ("$tuple", "$set", "$frozenset", "$dict", "$fraction", "$decimal", "$complex", "$numpy")


def _numpy_scalar(value: Any) -> tuple[str, Any] | None:
    """(dtype name, Python value) of a numpy scalar; None for anything else."""
    kind = type(value)
    if kind.__module__ != "numpy" or not hasattr(value, "dtype") or getattr(value, "ndim", 1):
        return None
    return value.dtype.str if value.dtype.kind in "SUV" else value.dtype.name, value.item()


def encode(value: Any, where: str = "value") -> Any:
    """`value` as JSON-able data with tags (see the module docstring); `where` names it in
    the TypeError an unsupported type raises."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if kind is tuple:
        return {"$tuple": [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if kind in (set, frozenset):
        items = sorted((encode(v, f"{where}{{}}") for v in value), key=json.dumps)
        return {f"${kind.__name__}": items}
    if kind is dict:
        if all(type(k) is str and k not in _TAGS for k in value):
            return {k: encode(v, f"{where}[{k!r}]") for k, v in value.items()}
        return {"$dict": [[encode(k, f"{where} key {k!r}"), encode(v, f"{where}[{k!r}]")]
                          for k, v in value.items()]}
    if kind is Fraction:
        return {"$fraction": str(value)}
    if kind is Decimal:
        return {"$decimal": str(value)}
    if kind is complex:
        return {"$complex": [value.real, value.imag]}
    scalar = _numpy_scalar(value)
    if scalar is not None:
        return {"$numpy": list(scalar)}
    raise TypeError(f"{where} is a {kind.__module__}.{kind.__qualname__}, which typed JSON "
                    "cannot carry exactly")


def _decode_tagged(tag: str, body: Any) -> Any:
    if tag == "$tuple":
        return tuple(decode(v) for v in body)
    if tag == "$set":
        return {decode(v) for v in body}
    if tag == "$frozenset":
        return frozenset(decode(v) for v in body)
    if tag == "$dict":
        return {decode(k): decode(v) for k, v in body}
    if tag == "$fraction":
        return Fraction(body)
    if tag == "$decimal":
        return Decimal(body)
    if tag == "$complex":
        return complex(*body)
    import numpy as np  # only rows that carry numpy scalars need it

    dtype, item = body
    return np.dtype(dtype).type(item)


def decode(data: Any) -> Any:
    """The value `encode` made `data` from."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if isinstance(data, dict):
        if len(data) == 1:
            (tag, body), = data.items()
            if tag in _TAGS:
                return _decode_tagged(tag, body)
        return {k: decode(v) for k, v in data.items()}
    return data


def dumps(value: Any, where: str = "value") -> str:
    """`value` as typed JSON text."""
    return json.dumps(encode(value, where), ensure_ascii=False)


def loads(text: str) -> Any:
    """The value of typed JSON text (plain JSON loads as `json.loads` loads it)."""
    return decode(json.loads(text))


def same(a: Any, b: Any) -> bool:
    """`a == b` with the same type at every level (1 and 1.0, (1,) and [1] differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a != a:  # nan
        return b != b
    return bool(a == b)


__all__ = ["decode", "dumps", "encode", "loads", "same"]
