"""The rollout engine in parts (issue 57): each part a module of at most 300 lines, no class
over 250, no method that only forwards its arguments to another object's method. The parts:
every module of agentrl/rollout/ (its subpackage, the backends, aside), so a new one is
held to the limits too."""

from __future__ import annotations

import ast
from pathlib import Path

import agentrl.rollout

ROLLOUT = Path(agentrl.rollout.__file__).parent
# the engine and its parts (engine.py's docstring lists the batch's), its modules' names
ENGINE_PARTS = sorted(path.name for path in ROLLOUT.glob("*.py"))
MAX_MODULE_LINES = 300
MAX_CLASS_LINES = 250


def _tree(name: str) -> ast.Module:
    return ast.parse((ROLLOUT / name).read_text())


def _forwards(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the body (its docstring aside) is one call of `self.<part>.<name>` or
    `self.<name>` passing on exactly the method's own parameters."""
    body = method.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)):
        return False
    call = body[0].value
    if isinstance(call, ast.Await):
        call = call.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return False
    params = [a.arg for a in method.args.args[1:] + method.args.kwonlyargs]
    passed = [a.id for a in call.args if isinstance(a, ast.Name)]
    passed += [k.value.id for k in call.keywords if isinstance(k.value, ast.Name)]
    return len(passed) == len(call.args) + len(call.keywords) and passed == params


def test_each_part_of_the_engine_is_at_most_300_lines():
    assert {"engine.py", "request.py", "check_offload.py", "__init__.py"} <= set(ENGINE_PARTS)
    sizes = {name: len((ROLLOUT / name).read_text().splitlines()) for name in ENGINE_PARTS}
    assert {n: s for n, s in sizes.items() if s > MAX_MODULE_LINES} == {}


def test_no_class_of_the_engine_is_over_250_lines():
    sizes = {
        f"{name}:{node.name}": node.end_lineno - node.lineno + 1
        for name in ENGINE_PARTS
        for node in _tree(name).body
        if isinstance(node, ast.ClassDef)
    }
    assert "engine.py:AsyncRolloutEngine" in sizes
    assert {n: s for n, s in sizes.items() if s > MAX_CLASS_LINES} == {}


def test_no_method_of_the_engine_only_forwards():
    forwarders = [
        f"{name}:{cls.name}.{node.name}"
        for name in ENGINE_PARTS
        for cls in _tree(name).body
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _forwards(node)
    ]
    assert forwarders == []


def test_the_forwarder_check_finds_one():
    method = ast.parse(
        "class E:\n"
        "    def collect(self, requests, batch, wall_s, rows=None):\n"
        "        '''doc'''\n"
        "        return self.collector.collect(requests, batch, wall_s, rows)\n"
    ).body[0].body[0]
    assert _forwards(method)
