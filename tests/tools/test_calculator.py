"""Tests for tools/calculator.py: exact results, and hostile inputs refused fast."""

import asyncio
import time

import pytest

from agentrl.tools import execute_tool_call, load_tools
from agentrl.tools.testing import check_tool_contract
from tools.calculator import CalculatorError, CalculatorTool, Limits, evaluate, format_result

CONFIG = "examples/tool_configs/calculator.yaml"


def run(expression, tool=None):
    tool = tool or CalculatorTool({})
    return asyncio.run(execute_tool_call(tool, "i", {"expression": expression}, timeout=5))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("6*7", "42"),
        ("(3 + 4) * 2 / 7", "2"),
        ("0.1 + 0.2", "0.3"),
        ("2**100", "1267650600228229401496703205376"),
        ("2**3**2", "512"),
        ("2**-1", "0.5"),
        ("-7 % 3", "2"),
        ("-7 // 2", "-4"),
        ("1 - 2 - 3", "-4"),
        ("+-+5", "-5"),
        ("sqrt(2) ** 2", "2"),
        ("sqrt(2)", "1.41421356237"),
        ("log(8, 2)", "3"),
        ("factorial(5) / 4", "30"),
        ("round(2.567, 2)", "2.57"),
        ("min(3, 1, 2) + max(4, 5)", "6"),
        ("floor(-2.5) + ceil(2.1) + abs(-3)", "3"),
        ("2 * pi", "6.28318530718"),
        ("1e20", "1e+20"),
        ("+".join(["1"] * 499), "499"),
        ("  12  ", "12"),
    ],
)
def test_results(expression, expected):
    response, reward, metrics = run(expression)
    assert (response.text, reward, metrics) == (expected, 0.0, {})


HOSTILE = [
    ("__import__('os').system('id')", "not_allowed", "Error: attribute access is not allowed"),
    ("__import__('os')", "not_allowed", "Error: function '__import__' is not allowed"),
    ("().__class__", "not_allowed", "Error: attribute access is not allowed"),
    (
        "().__class__.__bases__[0].__subclasses__()",
        "not_allowed",
        "Error: attribute access is not allowed",
    ),
    ("9**9**9", "too_large", "Error: exponent 3.8742e+08 exceeds the limit 1000"),
    ("10**100000", "too_large", "Error: exponent 100000 exceeds the limit 1000"),
    ("2**1000", "too_large", "Error: the result would exceed 1e+100"),
    ("10**99 * 10**99", "too_large", "Error: a value exceeds the magnitude limit 1e+100"),
    ("1" * 1_000_000, "too_long", "Error: expression longer than 1000 characters"),
    (
        "(" * 150 + "1" + ")" * 150,
        "too_deep",
        "Error: expression nested too deeply (over 100 levels)",
    ),
    ("-" * 500 + "1", "too_deep", "Error: expression nested too deeply (over 100 levels)"),
    ("lambda: 1", "not_allowed", "Error: lambda is not allowed"),
    ("[x for x in (1, 2)]", "not_allowed", "Error: a list comprehension is not allowed"),
    ("'abc'", "not_allowed", "Error: str values are not allowed"),
    ("True", "not_allowed", "Error: bool values are not allowed"),
    ("1j", "not_allowed", "Error: complex values are not allowed"),
    ("x", "not_allowed", "Error: unknown name 'x'"),
    ("open('/etc/passwd')", "not_allowed", "Error: function 'open' is not allowed"),
    ("sqrt(x=4)", "not_allowed", "Error: keyword arguments are not allowed"),
    ("2^3", "not_allowed", "Error: '^' is not a power here; use ** for powers"),
    ("~1", "not_allowed", "Error: operator '~' is not allowed"),
    ("1 < 2", "not_allowed", "Error: a comparison is not allowed"),
    (
        "round(5, -10**99)",
        "math",
        "Error: round(): round() needs a whole number of digits from -100 to 100",
    ),
    (
        "factorial(10**6)",
        "math",
        "Error: factorial(): factorial() needs a whole number from 0 to 200",
    ),
    ("1/0", "math", "Error: division by zero"),
    ("(-8) ** (1/3)", "math", "Error: the result is not a real number"),
    ("sqrt(-1)", "math", "Error: sqrt(): math domain error"),
    ("exp(1000)", "too_large", "Error: math range error"),
    ("1e400", "too_large", "Error: a value exceeds the magnitude limit 1e+100"),
    ("", "syntax", "Error: empty expression"),
    ("1 +", "syntax", "Error: invalid expression: invalid syntax"),
    ("import os", "syntax", "Error: invalid expression: invalid syntax"),
]


@pytest.mark.parametrize(("expression", "kind", "text"), HOSTILE)
def test_hostile_inputs_return_error_text_fast(expression, kind, text):
    start = time.perf_counter()
    response, reward, metrics = run(expression)
    # No hang: unbounded, these inputs take minutes or exhaust memory. The bound is loose
    # because a CI machine can pause for half a second (0.5 s once failed at 0.56 s).
    assert time.perf_counter() - start < 5.0
    assert (response.text, reward, metrics) == (text, 0.0, {"tool_error": kind})


def test_evaluation_time_is_bounded():
    # 250 operations: well inside the default bound, refused when the bound is zero.
    expression = "*".join(["(10**5 // 10**4)"] * 50)
    assert evaluate(expression) == 10**50
    with pytest.raises(CalculatorError, match="evaluation took too long") as err:
        evaluate(expression, Limits(max_time=0.0))
    assert err.value.kind == "timeout"


def test_limits_come_from_config_and_unknown_keys_are_errors():
    tool = CalculatorTool({"type": "native", "max_exponent": "10", "max_magnitude": "1e6"})
    assert tool.limits == Limits(max_exponent=10, max_magnitude=1e6)
    assert run("2**11", tool)[0].text == "Error: exponent 11 exceeds the limit 10"
    assert run("999 * 9999", tool)[0].text == "Error: a value exceeds the magnitude limit 1e+06"
    with pytest.raises(ValueError, match=r"unknown config keys \['max_len'\]"):
        CalculatorTool({"max_len": 3})


def test_format_number():
    assert [format_result(v) for v in [7, 7.0, 1 / 3, -0.0, 1e-7]] == [
        "7",
        "7",
        "0.333333333333",
        "-0",
        "1e-07",
    ]


def test_contract_and_yaml_config():
    tool = load_tools(CONFIG)["calculator"]
    assert isinstance(tool, CalculatorTool)
    report = asyncio.run(check_tool_contract(tool, {"expression": "1 + 2"}))
    assert (report.response.text, report.step_reward, report.reward) == ("3", 0.0, 0.0)


def test_non_string_expression_is_rejected_by_schema():
    response, _, metrics = run(12)
    assert metrics == {"tool_error": "invalid_arguments"}
    assert (
        response.text
        == "Error: invalid arguments for tool 'calculator' at 'expression': 12 is not of type 'string'"
    )
