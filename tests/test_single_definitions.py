"""One definition per rule: no choice list written in two modules of agentrl, and no default
of the config YAML repeated in the code as a `.get(key, default)` fallback.

A choice list is a module-level tuple, list, set or frozenset of two or more string literals;
two modules holding the same strings (in any order) define one rule twice: one of them must
import the other's (components below the config layer own theirs, the validator imports
them; components above import theirs from the validator). A fallback is
`X.get("key", LITERAL)`, `X.get("key") or LITERAL` or any call `f(..., "key", LITERAL)`
(getattr, a reader of its own) where "key" is a key of the default
YAML (agentrl/config/*.yaml) and LITERAL is its default there: the default lives in the
YAML, and the code reads the key of the validated config.

And one name, one meaning: a public function or class name is defined in one module of the
packages the wheel ships (agentrl, tools, envs, recipes), unless it is one of CONVENTIONS:
a name that modules of one kind each define because a caller reaches every such module by
it (a subcommand's `run(args)`), with the parameters that convention gives it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "agentrl"
WHEEL_PACKAGES = ("agentrl", "tools", "envs", "recipes")

# (module path, key): why the literal there is not the YAML's default of that key
NOT_CONFIG = {
    ("agentrl/gateway/responses_api.py", "temperature"): "an OpenAI request body's default",
    ("agentrl/gateway/responses_api.py", "top_p"): "an OpenAI request body's default",
    ("agentrl/rollout/backends/serve_generation.py", "max_tokens"): "an OpenAI request body's default",
    ("agentrl/rollout/backends/serve_generation.py", "temperature"): "an OpenAI request body's default",
    ("agentrl/rollout/backends/serve_generation.py", "top_p"): "an OpenAI request body's default",
    ("agentrl/interactions/openenv.py", "timeout"): "an interaction config's (the user's YAML)",
    ("agentrl/rollout/backends/vllm.py", "temperature"): "a request's sampling parameters",
    ("agentrl/rollout/backends/vllm.py", "top_p"): "a request's sampling parameters",
}


def _string_elements(value: ast.expr) -> list[str] | None:
    if (isinstance(value, ast.Call) and ast.unparse(value.func) in ("frozenset", "set", "tuple")
            and len(value.args) == 1):  # fmt: skip
        value = value.args[0]
    if not isinstance(value, (ast.Tuple, ast.List, ast.Set)) or len(value.elts) < 2:
        return None
    if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts):
        return None
    return [e.value for e in value.elts]


def choice_lists(source: str) -> dict[tuple[str, ...], str]:
    """The module-level choice lists of SOURCE: sorted strings -> the name they are bound to."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        name = ast.unparse(target)
        elements = _string_elements(value)
        if elements is not None and name != "__all__":
            found[tuple(sorted(elements))] = name
    return found


def duplicated_choice_lists(modules: dict[str, str]) -> list[str]:
    """Each choice list bound in two or more of MODULES (path -> source)."""
    where = defaultdict(list)
    for path, source in modules.items():
        for strings, name in choice_lists(source).items():
            where[strings].append(f"{path}:{name}")
    return [f"{list(strings)} in {', '.join(places)}" for strings, places in where.items()
            if len(places) > 1]  # fmt: skip


def yaml_defaults(documents: Iterable[object]) -> dict[str, set[object]]:
    """Every leaf key of the YAML documents -> its (non-null, non-interpolated) defaults."""
    defaults: dict[str, set[object]] = defaultdict(set)

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, (dict, list)):
                    walk(value)
                elif value is not None and not (isinstance(value, str) and "${" in value):
                    defaults[str(key)].add(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for document in documents:
        walk(document)
    return defaults


def _same(literal: object, default: object) -> bool:
    if isinstance(literal, bool) or isinstance(default, bool):
        return literal is default
    if isinstance(literal, (int, float)) and isinstance(default, (int, float)):
        return float(literal) == float(default)
    return literal == default


def _fallback(node: ast.AST) -> tuple[str, object] | None:
    """(key, literal) of a call given "key" then a literal (`X.get("key", literal)`,
    `getattr(X, "key", literal)`, a reader of its own) or of `X.get("key") or literal`."""
    def get_key(call: ast.AST) -> str | None:
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "get" and len(call.args) == 1
                and isinstance(call.args[0], ast.Constant)
                and isinstance(call.args[0].value, str)):  # fmt: skip
            return call.args[0].value
        return None

    if isinstance(node, ast.Call):
        for key_arg, literal in zip(node.args, node.args[1:], strict=False):
            if (isinstance(key_arg, ast.Constant) and isinstance(key_arg.value, str)
                    and isinstance(literal, ast.Constant)):  # fmt: skip
                return key_arg.value, literal.value
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2:
        call, literal = node.values
        if (key := get_key(call)) is not None and isinstance(literal, ast.Constant):
            return key, literal.value
    return None


def repeated_defaults(modules: dict[str, str], defaults: dict[str, set[object]]) -> list[str]:
    """Each `.get` fallback in MODULES (path -> source) that repeats a YAML default."""
    found = []
    for path, source in modules.items():
        for node in ast.walk(ast.parse(source)):
            hit = _fallback(node)
            if hit is None or hit[1] is None or (path, hit[0]) in NOT_CONFIG:
                continue
            key, literal = hit
            if any(_same(literal, default) for default in defaults.get(key, ())):
                found.append(f"{path}:{node.lineno}: .get({key!r}, {literal!r})")
    return found


def _package_sources() -> dict[str, str]:
    return {str(path.relative_to(REPO)): path.read_text()
            for path in sorted(PACKAGE.rglob("*.py"))}  # fmt: skip


def _default_yaml() -> dict[str, set[object]]:
    return yaml_defaults(yaml.safe_load(path.read_text())
                         for path in sorted((PACKAGE / "config").glob("*.yaml")))  # fmt: skip


def test_no_choice_list_is_written_in_two_modules():
    assert duplicated_choice_lists(_package_sources()) == []


def test_no_yaml_default_is_repeated_as_a_code_fallback():
    assert repeated_defaults(_package_sources(), _default_yaml()) == []


def test_the_allowed_fallbacks_are_still_there():
    """An entry of NOT_CONFIG whose fallback is gone is stale: remove it."""
    sources = _package_sources()
    for path, key in NOT_CONFIG:
        keys = {hit[0] for node in ast.walk(ast.parse(sources[path]))
                if (hit := _fallback(node)) is not None}  # fmt: skip
        assert key in keys, (path, key)


def test_a_reintroduced_choice_list_is_found():
    modules = {
        "agentrl/a.py": 'MODES = ("token-mean", "seq-mean")\n__all__ = ["x", "y"]\n',
        "agentrl/b.py": '_MODES: tuple = frozenset({"seq-mean", "token-mean"})\n'
                        '__all__ = ["x", "y"]\nOTHER = ("token-mean",)\n',
        "agentrl/c.py": 'def f():\n    modes = ("token-mean", "seq-mean")\n',
    }
    (problem,) = duplicated_choice_lists(modules)
    assert "agentrl/a.py:MODES" in problem and "agentrl/b.py:_MODES" in problem
    assert duplicated_choice_lists({"agentrl/a.py": modules["agentrl/a.py"]}) == []


@pytest.mark.parametrize(("source", "found"), [
    ('n = int(cfg.get("max_concurrency") or 32)\n', True),
    ('n = float(cfg.get("request_timeout", 300))\n', True),  # 300 == 300.0
    ('n = cfg.get("max_concurrency", 7)\n', False),  # not the YAML's default
    ('n = cfg.get("not_a_key", 32)\n', False),
    ('n = cfg.max_concurrency\n', False),
    ('flag = cfg.get("enable", False)\n', True),
    ('flag = cfg.get("enable", 0)\n', False),  # a bool default is not 0
    ('ratio = read(cfg, "request_timeout", 300.0)\n', True),
    ('ratio = getattr(cfg, "max_concurrency", 32)\n', True),
    ('ratio = getattr(cfg, "max_concurrency", 31)\n', False),
])  # fmt: skip
def test_a_reintroduced_fallback_is_found(source, found):
    defaults = yaml_defaults([yaml.safe_load(
        "teacher:\n  max_concurrency: 32\n  request_timeout: 300.0\n  path: ${x.y}\n"
        "judge:\n  enable: false\n")])  # fmt: skip
    assert bool(repeated_defaults({"agentrl/x.py": source}, defaults)) is found
    assert "path" not in defaults  # an interpolation is no default


# name -> (the modules that define it and who reaches them by it, the parameters it may take)
CONVENTIONS: dict[str, tuple[str, Callable[[tuple[str, ...]], bool]]] = {
    "add_arguments": ("a subcommand module's arguments: agentrl.cli.COMMANDS (and the envs' "
                      "servers' CLIs) call module.add_arguments(parser)",
                      lambda p: p == ("parser",)),
    "run": ("a subcommand module's entry, module.run(args) (agentrl.cli.COMMANDS); or an agent "
            "function run(task, client) named by rollout.agent_function (agentrl/agents, "
            "docs/agents.md)", lambda p: p in {("args",), ("task", "client")}),
    "main": ("a module's `python -m` entry point", lambda p: p in {(), ("argv",)}),
    "compute_score": ("verl's reward-module function: a data_source's module in "
                      "agentrl/reward/score, called with solution_str and ground_truth",
                      lambda p: {"solution_str", "ground_truth"} <= set(p)),
    "prepare": ("an environment adapter: environments/prepare.py calls "
                "agentrl.environments.<kind>.prepare(name, size, test_size, seed, answer_tag, "
                "*, allow_shared_prompts)",
                lambda p: p[1:] == ("size", "test_size", "seed", "answer_tag")),
    "system_prompt": ("an environment adapter's system prompt, asking for the answer inside "
                      "<answer_tag></answer_tag>", lambda p: p[:1] == ("answer_tag",)),
    "make_rows": ("an environment adapter's verl rows of one split",
                  lambda p: "split" in p),
    "interaction_config": ("an environment adapter's interaction YAML (what its prepare "
                           "writes as interaction.yaml)", lambda p: True),
    "create_app": ("a server module's FastAPI app factory (agentrl serve, the gateway, the "
                   "sandbox and retriever servers)", lambda p: True),
    "agent": ("a harness module's agent-function factory, agent(**options) (agentrl/agents)",
              lambda p: p == ()),
}


def public_definitions(modules: dict[str, str]) -> dict[str, list[tuple[str, object]]]:
    """Public top-level function and class names of MODULES (path -> source) -> where each
    is defined: (path, its positional parameter names, or "class")."""
    where: dict[str, list[tuple[str, object]]] = defaultdict(list)
    for path, source in modules.items():
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append((path, "class"))
            elif (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and not node.name.startswith("_")):  # fmt: skip
                args = node.args.posonlyargs + node.args.args
                where[node.name].append((path, tuple(a.arg for a in args)))
    return where


def names_of_two_meanings(modules: dict[str, str]) -> list[str]:
    """Each public name MODULES define twice or more, unless every definition keeps its
    convention (a function, with the parameters CONVENTIONS allows)."""
    found = []
    for name, places in sorted(public_definitions(modules).items()):
        if len(places) < 2:
            continue
        convention = CONVENTIONS.get(name)
        if convention is None or not all(kind != "class" and convention[1](kind)
                                         for _, kind in places):  # fmt: skip
            found.append(f"{name}: {', '.join(f'{path} {kind}' for path, kind in places)}")
    return found


def _wheel_sources() -> dict[str, str]:
    return {str(path.relative_to(REPO)): path.read_text()
            for package in WHEEL_PACKAGES
            for path in sorted((REPO / package).rglob("*.py"))}  # fmt: skip


def test_each_public_name_has_one_definition_or_keeps_its_convention():
    assert names_of_two_meanings(_wheel_sources()) == []


def test_every_convention_is_still_used_twice():
    """A convention no two modules follow any more is stale: remove it."""
    where = public_definitions(_wheel_sources())
    assert [name for name in CONVENTIONS if len(where.get(name, ())) < 2] == []


def test_a_name_of_two_meanings_is_found():
    modules = {
        "agentrl/a.py": "def batch_metrics(batch):\n    pass\nclass Span:\n    pass\n",
        "agentrl/b.py": "def batch_metrics(outputs):\n    pass\n",
        "tools/c.py": "class Span:\n    pass\ndef _private():\n    pass\n",
        "agentrl/d.py": "def _private():\n    pass\ndef run(args):\n    pass\n",
        "agentrl/e.py": "def run(args):\n    pass\n",
    }
    found = names_of_two_meanings(modules)
    assert [line.split(":")[0] for line in found] == ["Span", "batch_metrics"]
    modules["agentrl/f.py"] = "def run(engine, batch):\n    pass\n"  # a third meaning of run
    assert any(line.startswith("run:") for line in names_of_two_meanings(modules))
