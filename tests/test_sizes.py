"""Sizes the package keeps (issue 57): no function or method of agentrl over 120 lines
(a nested function counts on its own and inside the one around it), and the modules that
grew fastest under their limits: agentrl/rollout/backends/hf.py 700 lines,
agentrl/trainer/ppo_trainer.py 300. A function's lines run from its ``def`` to its last
line (decorators left out). Over a limit, split by job: route handlers in modules of their
own, a coherent part into a module named for it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "agentrl"
MAX_FUNCTION_LINES = 120
MAX_MODULE_LINES = {
    "agentrl/rollout/backends/hf.py": 700,
    "agentrl/trainer/ppo_trainer.py": 300,
}


def long_functions(source: str, where: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``where:line name (N lines)`` for each function of SOURCE longer than LIMIT lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def _modules() -> dict[str, str]:
    return {path.relative_to(REPO).as_posix(): path.read_text()
            for path in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in path.parts}


def test_no_function_is_over_120_lines():
    found = [hit for where, source in _modules().items() for hit in long_functions(source, where)]
    assert found == []


def test_the_fastest_growing_modules_stay_under_their_limits():
    modules = _modules()
    over = {path: len(modules[path].splitlines()) for path, limit in MAX_MODULE_LINES.items()
            if len(modules[path].splitlines()) >= limit}
    assert over == {}


def _function(name: str, lines: int, indent: str = "") -> str:
    return f"{indent}def {name}():\n" + "".join(f"{indent}    x = {i}\n" for i in range(lines - 1))


def test_a_long_function_is_found_nested_or_not():
    source = (_function("at_the_limit", 120) + _function("over", 121)
              + "async def outer():\n" + _function("inner", 121, "    ") + "    return inner\n")
    found = long_functions(source, "m.py")
    assert found == ["m.py:121 over (121 lines)", "m.py:242 outer (123 lines)",
                     "m.py:243 inner (121 lines)"]
