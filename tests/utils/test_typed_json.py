"""Typed JSON gives back the value it was made from, types included."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from agentrl.utils.typed_json import dumps, encode, loads, same


def test_values_plain_json_would_change_come_back_as_they_were():
    value = {
        "grid": ((0, 1), (1, 0)), "colors": {3: "red", 4.5: "blue"}, "p": Fraction(1, 3),
        "d": Decimal("0.10"), "z": complex(1, -2), "s": {3, 1}, "fs": frozenset({"a"}),
        "n": [np.float64(0.25), np.str_("knave"), np.int32(7)], "none": None, "b": True,
        "tagged": {"$tuple": [1]}, "big": 10**40, "nan": math.nan,
    }  # fmt: skip
    back = loads(dumps(value))
    assert same(back, value)
    assert back["grid"] == ((0, 1), (1, 0)) and back["colors"] == {3: "red", 4.5: "blue"}
    assert back["tagged"] == {"$tuple": [1]} and type(back["n"][0]) is np.float64
    assert type(back["n"][1]) is np.str_ and back["n"][2].dtype == np.int32
    assert back["p"] == Fraction(1, 3) and str(back["d"]) == "0.10"


def test_plain_json_loads_as_json_loads_it():
    text = json.dumps({"question": "q", "metadata": {"a": [1, 2.5, None, {"b": "c"}]}})
    assert loads(text) == json.loads(text)
    assert encode({"a": [1, "x"]}) == {"a": [1, "x"]}  # nothing tagged that needs no tag


def test_a_type_it_cannot_carry_is_named_with_where_it_is():
    with pytest.raises(TypeError, match=r"item\['metadata'\]\['grid'\] is a numpy.ndarray"):
        dumps({"metadata": {"grid": np.zeros(2)}}, "item")
    with pytest.raises(TypeError, match=r"item\[1\] is a builtins.object"):
        dumps([1, object()], "item")


def test_same_tells_types_apart():
    assert same({"a": (1, [2.0])}, {"a": (1, [2.0])})
    assert not same((1,), [1]) and not same(1, 1.0) and not same(1, True)
    assert not same({1: "a"}, {"1": "a"}) and not same([1, 2], [1])
