"""Calculator tool: safe arithmetic by walking Python's AST (never ``eval``/``exec``).

Allowed: int and float literals, ``+ - * / // % **``, unary ``+``/``-``, parentheses, the
constants ``pi e tau`` and the functions in ``FUNCTIONS``. Everything else (names,
attributes, other calls, ``__import__``, lambdas, comprehensions, strings, booleans, complex
numbers) is an error text for the model. Bounded: expression length, nesting depth, exponent
size, the magnitude of every intermediate value, and evaluation time.

``calc_reward`` is always 0.0: the calculator computes, it does not judge answers (the
dataset's reward function scores the final answer). Step reward is 0.0 too.

Tool config keys (all optional): ``max_length`` (1000 characters), ``max_depth`` (100),
``max_exponent`` (1000), ``max_magnitude`` (1e100), ``max_time`` (0.1 s).
Parameters: ``{"expression": string}``.
"""

from __future__ import annotations

import ast
import math
import operator
import time
from dataclasses import dataclass
from typing import Any

from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse

Number = int | float

DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": (
            "Evaluate an arithmetic expression, e.g. '(3 + 4) * 2 / 7' or 'sqrt(2) ** 3'. "
            "Supports + - * / // % **, parentheses, pi, e and math functions "
            "(sqrt, exp, log, log10, log2, sin, cos, tan, asin, acos, atan, floor, ceil, "
            "abs, round, min, max, factorial)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "expression": {"type": "string", "description": "The expression to evaluate."}
            },
            "required": ["expression"],
        },
    },
}

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _factorial(n: Number) -> int:
    if isinstance(n, float):
        if not n.is_integer():
            raise ValueError("factorial() needs a whole number")
        n = int(n)
    if not 0 <= n <= 200:
        raise ValueError("factorial() needs a whole number from 0 to 200")
    return math.factorial(n)


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or abs(ndigits) > 100:
        # round(5, -10**99) would build 10**(10**99): bounded here.
        raise ValueError("round() needs a whole number of digits from -100 to 100")
    return round(x, ndigits)


FUNCTIONS: dict[str, Any] = {
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "floor": math.floor,
    "ceil": math.ceil,
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "factorial": _factorial,
}


class CalculatorError(ValueError):
    """An expression the calculator refuses; ``kind`` names the reason for metrics."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Limits:
    max_length: int = 1000
    max_depth: int = 100
    max_exponent: int = 1000
    max_magnitude: float = 1e100
    max_time: float = 0.1


def _paren_depth(expression: str) -> int:
    depth = deepest = 0
    for ch in expression:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


class _Evaluator:
    """One evaluation: walks the tree, checking depth, time and magnitude at every node."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.max_time

    def eval(self, node: ast.AST, depth: int = 0) -> Number:
        if depth > self.limits.max_depth:
            raise CalculatorError(
                "too_deep", f"expression nested too deeply (over {self.limits.max_depth} levels)"
            )
        if time.monotonic() > self.deadline:
            raise CalculatorError("timeout", "evaluation took too long")
        value = self._eval_node(node, depth + 1)
        return self._check(value)

    def _check(self, value: Any) -> Number:
        if isinstance(value, complex):
            raise CalculatorError("math", "the result is not a real number")
        if isinstance(value, float) and math.isnan(value):
            raise CalculatorError("math", "the result is not a number (nan)")
        if abs(value) > self.limits.max_magnitude:
            raise CalculatorError(
                "too_large", f"a value exceeds the magnitude limit {self.limits.max_magnitude:g}"
            )
        return value

    def _eval_node(self, node: ast.AST, depth: int) -> Any:
        if isinstance(node, ast.Constant):
            return self._constant(node.value)
        if isinstance(node, ast.BinOp):
            return self._binary(node, depth)
        if isinstance(node, ast.UnaryOp):
            if type(node.op) not in _UNARY:
                raise CalculatorError(
                    "not_allowed", f"operator {_describe(node.op)} is not allowed"
                )
            return _UNARY[type(node.op)](self.eval(node.operand, depth))
        if isinstance(node, ast.Name):
            if node.id in CONSTANTS:
                return CONSTANTS[node.id]
            raise CalculatorError("not_allowed", f"unknown name {node.id!r}")
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        raise CalculatorError("not_allowed", f"{_describe(node)} is not allowed")

    @staticmethod
    def _constant(value: Any) -> Number:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CalculatorError("not_allowed", f"{type(value).__name__} values are not allowed")
        return value

    def _binary(self, node: ast.BinOp, depth: int) -> Number:
        # A left-leaning chain (1 + 2 - 3 * ...) is folded in a loop, not by recursion,
        # so a long flat sum does not count as deep nesting.
        chain = []
        left: ast.AST = node
        while isinstance(left, ast.BinOp):
            chain.append(left)
            left = left.left
        value = self.eval(left, depth)
        for binop in reversed(chain):
            value = self._check(self._apply(binop.op, value, self.eval(binop.right, depth)))
        return value

    def _apply(self, op: ast.operator, left: Number, right: Number) -> Any:
        if isinstance(op, ast.BitXor):
            raise CalculatorError("not_allowed", "'^' is not a power here; use ** for powers")
        if type(op) not in _BINARY:
            raise CalculatorError("not_allowed", f"operator {_describe(op)} is not allowed")
        if isinstance(op, ast.Pow):
            self._check_power(left, right)
        return _BINARY[type(op)](left, right)

    def _check_power(self, base: Number, exponent: Number) -> None:
        if abs(exponent) > self.limits.max_exponent:
            raise CalculatorError(
                "too_large", f"exponent {exponent:g} exceeds the limit {self.limits.max_exponent}"
            )
        if abs(base) > 1 and exponent > 0:
            digits = exponent * math.log10(abs(base))
            if digits > math.log10(self.limits.max_magnitude) + 1:
                raise CalculatorError(
                    "too_large", f"the result would exceed {self.limits.max_magnitude:g}"
                )

    def _call(self, node: ast.Call, depth: int) -> Number:
        if not isinstance(node.func, ast.Name):
            raise CalculatorError("not_allowed", f"{_describe(node.func)} is not allowed")
        if node.func.id not in FUNCTIONS:
            raise CalculatorError("not_allowed", f"function {node.func.id!r} is not allowed")
        if node.keywords:
            raise CalculatorError("not_allowed", "keyword arguments are not allowed")
        args = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise CalculatorError("not_allowed", "*arguments are not allowed")
            args.append(self.eval(arg, depth))
        name = node.func.id
        try:
            return FUNCTIONS[name](*args)
        except TypeError as err:
            raise CalculatorError("math", f"bad arguments to {name}(): {err}") from None
        except ValueError as err:
            raise CalculatorError("math", f"{name}(): {err}") from None


def _describe(node: ast.AST) -> str:
    names = {
        "Attribute": "attribute access",
        "Subscript": "indexing",
        "Lambda": "lambda",
        "ListComp": "a list comprehension",
        "SetComp": "a set comprehension",
        "DictComp": "a dict comprehension",
        "GeneratorExp": "a generator expression",
        "Compare": "a comparison",
        "BoolOp": "and/or",
        "IfExp": "if/else",
        "NamedExpr": "':='",
        "Invert": "'~'",
        "Not": "'not'",
        "BitAnd": "'&'",
        "BitOr": "'|'",
        "LShift": "'<<'",
        "RShift": "'>>'",
        "MatMult": "'@'",
    }
    kind = type(node).__name__
    return names.get(kind, kind)


def evaluate(expression: str, limits: Limits | None = None) -> Number:
    """Evaluate an arithmetic expression within ``limits``; raises ``CalculatorError``."""
    limits = limits or Limits()
    if not isinstance(expression, str):
        raise CalculatorError("syntax", "the expression must be a string")
    if len(expression) > limits.max_length:
        raise CalculatorError("too_long", f"expression longer than {limits.max_length} characters")
    expression = expression.strip()
    if not expression:
        raise CalculatorError("syntax", "empty expression")
    if _paren_depth(expression) > limits.max_depth:
        raise CalculatorError(
            "too_deep", f"expression nested too deeply (over {limits.max_depth} levels)"
        )
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        message = getattr(err, "msg", None) or str(err) or type(err).__name__
        raise CalculatorError("syntax", f"invalid expression: {message}") from None
    try:
        return _Evaluator(limits).eval(tree.body)
    except (ZeroDivisionError, OverflowError) as err:
        kind = "math" if isinstance(err, ZeroDivisionError) else "too_large"
        raise CalculatorError(kind, str(err)) from None
    except RecursionError:
        raise CalculatorError("too_deep", "expression nested too deeply") from None


def format_result(value: Number) -> str:
    """Integers exactly; floats to 12 significant digits (``0.1 + 0.2`` -> ``0.3``)."""
    if isinstance(value, int):
        return str(value)
    return format(value, ".12g")


def _limits_from_config(config: dict[str, Any]) -> Limits:
    fields = Limits.__dataclass_fields__
    unknown = set(config) - set(fields) - {"type"}
    if unknown:
        raise ValueError(f"calculator tool: unknown config keys {sorted(unknown)}")
    # YAML reads 1e100 (no dot) as a string: convert to the field's type.
    casts = {"max_magnitude": float, "max_time": float}
    return Limits(**{k: casts.get(k, int)(v) for k, v in config.items() if k in fields})


class CalculatorTool(BaseTool):
    """Evaluates ``{"expression": ...}``; an invalid expression returns ``Error: ...``."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        schema = tool_schema or OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)
        super().__init__(config, schema)
        self.limits = _limits_from_config(self.config)

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        expression = parameters.get("expression")
        try:
            value = evaluate(expression, self.limits)
        except CalculatorError as err:
            return ToolResponse(text=f"Error: {err}"), 0.0, {"tool_error": err.kind}
        return ToolResponse(text=format_result(value)), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """Always 0.0: the reward function, not the calculator, scores the answer."""
        return 0.0
