"""The fast check of flat argument schemas decides validity exactly as jsonschema does."""

from __future__ import annotations

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.tools.flat_schema import flat_check

TYPES = ["string", "integer", "number", "boolean", "null", "object", "array"]
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-3, 3),
                   st.sampled_from([0.0, 1.0, 2.5, -1.0]), st.sampled_from(["", "a", "1"]))
VALUE = st.one_of(SCALAR, st.lists(SCALAR, max_size=2),
                  st.dictionaries(st.sampled_from(["a", "b"]), SCALAR, max_size=2))
PROPERTY = st.fixed_dictionaries(
    {}, optional={"type": st.one_of(st.sampled_from(TYPES),
                                    st.lists(st.sampled_from(TYPES), min_size=1, max_size=3)),
                  "enum": st.lists(SCALAR, min_size=1, max_size=4),
                  "description": st.just("what it is")})
NAMES = st.sampled_from(["x", "y", "z"])
SCHEMA = st.fixed_dictionaries(
    {"type": st.just("object"), "properties": st.dictionaries(NAMES, PROPERTY, max_size=3)},
    optional={"required": st.lists(NAMES, max_size=3, unique=True),
              "additionalProperties": st.booleans()})
ARGUMENTS = st.dictionaries(st.sampled_from(["x", "y", "z", "w"]), VALUE, max_size=4)


@settings(max_examples=600, deadline=None)
@given(SCHEMA, ARGUMENTS)
def test_the_fast_check_agrees_with_jsonschema(schema, arguments):
    check = flat_check(schema)
    assert check is not None  # every schema of this family is flat
    assert check(arguments) == jsonschema.Draft202012Validator(schema).is_valid(arguments)


def test_schemas_outside_the_flat_family_keep_jsonschema():
    nested = {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "string"}}}}
    bounded = {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0}}}
    referenced = {"type": "object", "$defs": {}, "properties": {}}
    open_extra = {"type": "object", "additionalProperties": {"type": "string"}}
    assert all(flat_check(s) is None for s in (nested, bounded, referenced, open_extra, True))


def test_a_typical_tool_schema_takes_the_fast_path():
    schema = {"type": "object", "properties": {"expression": {"type": "string",
              "description": "an arithmetic expression"}}, "required": ["expression"]}
    check = flat_check(schema)
    assert check({"expression": "1+1"}) and not check({}) and not check({"expression": 3})
    assert check({"expression": "1", "extra": 1})  # additional properties are allowed
