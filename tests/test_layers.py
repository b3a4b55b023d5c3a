"""The import contracts of pyproject.toml hold: agentrl's layers, the wheel's packages
(agentrl never imports tools, envs or recipes), no import cycles; and the string imports the
contracts cannot see point down."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent


def _lint_imports() -> str:
    exe = Path(sys.executable).with_name("lint-imports")
    if exe.exists():
        return str(exe)
    found = shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    return found


def _run(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run([_lint_imports(), "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip


PACKAGES = ("agentrl", "tools", "envs", "recipes")


def test_layers_and_acyclic_contracts_are_kept():
    proc = _run(REPO, REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 3 kept, 0 broken." in proc.stdout


def test_the_contracts_cover_every_package_the_wheel_ships():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    shipped = {p.rstrip("*") for p in config["tool"]["setuptools"]["packages"]["find"]["include"]}
    linter = config["tool"]["importlinter"]
    assert set(linter["root_packages"]) == shipped == set(PACKAGES)
    contracts = {c["id"]: c for c in linter["contracts"]}
    assert set(contracts["acyclic"]["ancestors"]) == shipped
    assert contracts["plugins"]["layers"][-1] == "agentrl"


def _copy_packages(tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip


def test_agentrl_importing_a_plugin_package_breaks_a_contract(tmp_path):
    """agentrl reaches tools/envs/recipes only by plugin path: a direct import fails."""
    _copy_packages(tmp_path)
    path = tmp_path / "agentrl" / "smoke.py"
    path.write_text(path.read_text() + "\nimport tools.calculator  # noqa\n")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    proc = _run(tmp_path, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "agentrl.smoke -> tools.calculator" in proc.stdout


@pytest.mark.parametrize(
    ("module", "added", "message"),
    [
        ("utils/aio.py", "import agentrl.trainer.metrics", "agentrl.utils.aio -> agentrl.trainer.metrics"),
        ("utils/command.py", "import agentrl.utils.aio", "No cycles are allowed in agentrl.utils"),
    ],
)
def test_an_upward_import_or_a_cycle_breaks_a_contract(tmp_path, module, added, message):
    """The contracts are not vacuous: over a copy of the package with one upward import
    (utils importing the trainer) or one cycle (utils.aio <-> utils.command), lint-imports
    fails and names it."""
    _copy_packages(tmp_path)
    path = tmp_path / "agentrl" / module
    path.write_text(path.read_text() + f"\n{added}  # noqa\n")
    if module == "utils/command.py":  # the other half of the cycle
        aio = tmp_path / "agentrl" / "utils" / "aio.py"
        aio.write_text(aio.read_text() + "\nimport agentrl.utils.command  # noqa\n")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    proc = _run(tmp_path, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert message in proc.stdout


def _layers() -> list[set[str]]:
    """agentrl's layers, top first: each a set of its top-level module names."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"]
                 if c["id"] == "layers"]  # fmt: skip
    return [{name.strip() for name in layer.split("|")} for layer in layers]


def _layer_of(module: str) -> int:
    parts = module.split(".")
    assert parts[0] == "agentrl", module
    for index, layer in enumerate(_layers()):
        if parts[1] in layer:
            return index
    raise AssertionError(f"{module} is in no layer of pyproject.toml")


def _string_targets() -> dict[str, list[str]]:
    """Holder module -> the modules it imports by string (its import tables)."""
    from agentrl import compat, verl_compat
    from agentrl.cli import COMMANDS

    return {
        "agentrl.compat": [*compat.MOVED_MODULES.values(), *compat.RENAMED_NAMES],
        "agentrl.verl_compat": [t for t, _ in verl_compat.MODULES.values() if t is not None],
        "agentrl.cli": [module for module, _ in COMMANDS.values()],
    }


@pytest.mark.parametrize("holder", ["agentrl.compat", "agentrl.verl_compat", "agentrl.cli"])
def test_string_imports_point_down_or_at_a_plugin_package(holder):
    targets = _string_targets()[holder]
    assert targets
    for target in targets:
        if target.split(".")[0] in PACKAGES[1:]:
            continue  # a plugin path (tools.gsm8k, envs.sandbox.cli), as a config names one
        if target == holder:
            continue
        assert _layer_of(target) > _layer_of(holder), f"{holder} names {target}, a layer above"


def test_no_other_module_imports_by_string_upward():
    """`import_module("agentrl....")` / `load_object("agentrl....")` with a literal path,
    anywhere in agentrl, names a module of its own layer or below."""
    import ast

    for path in sorted((REPO / "agentrl").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        if module.endswith(".__init__") or module in _string_targets():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                    and ast.unparse(node.func).split(".")[-1] in ("import_module", "load_object")
                    and node.args[0].value.startswith("agentrl.")):  # fmt: skip
                continue
            target = node.args[0].value
            assert _layer_of(target) >= _layer_of(module), f"{module} loads {target}"
