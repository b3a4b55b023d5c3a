"""The batch source is one small interface the trainer asks in full: every member of
`BatchSource` is called by the trainer, the in-step source has no member that does nothing,
and no method of the trainer package is called by a name held in a string."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import agentrl.trainer
from agentrl.trainer.batch_source import BatchSource, RolloutInStep

TRAINER_DIR = Path(agentrl.trainer.__file__).parent
# the modules that hold a batch source and ask it (the trainer and its checkpoints)
ASKERS = ("ppo_trainer.py", "run_checkpoints.py")


def _public_members(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")}


def asked_of_source(source: str) -> set[str]:
    """The attributes read of anything named `source` (`self.source.x`, `source.x`)."""
    asked = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name == "source":
                asked.add(node.attr)
    return asked


def test_the_scan_finds_what_is_asked_of_a_source():
    code = "self.source.start(1)\nsource.run_step(x)\nother.close()\nsource_x.y()\n"
    assert asked_of_source(code) == {"start", "run_step"}


def test_every_member_of_the_interface_is_asked_by_the_trainer():
    asked = set().union(*(asked_of_source((TRAINER_DIR / m).read_text()) for m in ASKERS))
    members = _public_members(BatchSource)
    assert members == {"start_workers", "running", "run_step", "state_dict", "close"}
    assert members - asked == set(), "members of BatchSource no trainer module asks"
    assert asked - members == set(), "the trainer asks its source for what is not declared"


def _does_nothing(function: ast.FunctionDef) -> bool:
    """A body that is only a docstring, `pass`, `...`, `return`, `return {}`/`None`, or
    returns one of its own parameters unchanged."""
    body = [s for s in function.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # fmt: skip
    if not body:
        return True
    if len(body) > 1:
        return False
    (statement,) = body
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Return):
        value = statement.value
        params = {a.arg for a in function.args.args}
        return (value is None or (isinstance(value, ast.Constant) and value.value is None)
                or (isinstance(value, ast.Dict) and not value.keys)
                or (isinstance(value, ast.Name) and value.id in params))  # fmt: skip
    return False


def _methods(cls: type) -> list[ast.FunctionDef]:
    (node,) = ast.parse(inspect.getsource(cls)).body
    return [f for f in node.body if isinstance(f, ast.FunctionDef)]


def test_the_scan_knows_a_member_that_does_nothing():
    code = ("class S:\n    def a(self):\n        pass\n    def b(self, c):\n        return c\n"
            "    def d(self):\n        return {}\n    def e(self, c):\n        return c + 1\n")
    (cls,) = ast.parse(code).body
    assert [f.name for f in cls.body if _does_nothing(f)] == ["a", "b", "d"]


def test_the_in_step_source_defines_only_members_that_do_something():
    defined = [f.name for f in _methods(RolloutInStep)]
    assert set(defined) == {"__init__", "running", "run_step"}
    assert [f.name for f in _methods(RolloutInStep) if _does_nothing(f)] == []
    # what it does not define is the interface's default, which does something too, but for
    # the checkpoint's empty share (a source whose rollout lives in the workers holds none)
    defaults = [f.name for f in _methods(BatchSource)
                if _does_nothing(f) and f.name not in {"running", "run_step"}]  # abstract
    assert defaults == ["state_dict"]


def names_called_by_string(source: str) -> list[str]:
    """`getattr(obj, name)` with a name not written out whose answer is called or used
    (`getattr(obj, name)(...)`, `getattr(actor, name).remote(...)`), and functions that take
    a method's name (`def _call(self, method: str, ...)`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        used = (node.func if isinstance(node, ast.Call)
                else node.value if isinstance(node, ast.Attribute) else None)  # fmt: skip
        if (isinstance(used, ast.Call) and isinstance(used.func, ast.Name)
                and used.func.id == "getattr" and len(used.args) >= 2
                and not isinstance(used.args[1], ast.Constant)):  # fmt: skip
            found.append(f"getattr(..., {ast.unparse(used.args[1])})")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [f"{node.name}({a.arg})" for a in node.args.args
                      if a.arg in {"method", "method_name"}]  # fmt: skip
    return found


def test_the_scan_finds_a_method_called_by_its_name():
    code = ("def _call(self, method, *args):\n"
            "    return ray.get(getattr(self.host, method).remote(*args))\n"
            "getattr(obj, name)(1)\n"
            "getattr(sampler, 'update', None)\n"  # written out: found by a text search
            "if getattr(self, field) < 1: pass\n")  # a field's value, not a call
    assert sorted(names_called_by_string(code)) == ["_call(method)", "getattr(..., method)",
                                                    "getattr(..., name)"]


@pytest.mark.parametrize("module", sorted(p.name for p in TRAINER_DIR.glob("*.py")))
def test_no_method_in_the_trainer_package_is_called_by_a_name_in_a_string(module):
    found = names_called_by_string((TRAINER_DIR / module).read_text())
    assert found == [], f"{module}: call the method itself, not by its name: {found}"
