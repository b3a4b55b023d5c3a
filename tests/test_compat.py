"""Old public names keep working through one module (agentrl/compat.py), with a
DeprecationWarning that names the new path; no per-file shim module is left."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentrl.compat import MOVED_MODULES, RENAMED_NAMES, MovedModuleFinder, renamed_attributes

PACKAGE = Path(__file__).resolve().parents[1] / "agentrl"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_MODULES.items()))
def test_every_old_path_warns_and_gives_the_new_module(old, new):
    # A fresh interpreter: the old path must not be imported yet for the warning to fire.
    proc = _run(f"""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import {old} as from_old
        import sys
        import {new} as new_module
        assert from_old is new_module, (from_old, new_module)
        assert sys.modules[{old!r}] is new_module
        assert new_module.__name__ == {new!r} and new_module.__spec__.name == {new!r}
        messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
        assert any("{old} moved to {new}" in m for m in messages), messages
        # the warning points at the importing line, not at the import machinery
        assert any(w.filename == "<string>" for w in caught), [w.filename for w in caught]
    """)
    assert proc.returncode == 0, proc.stderr


def test_from_an_old_path_import_a_name_gives_the_new_object():
    proc = _run("""
        import warnings
        warnings.simplefilter("ignore")
        from agentrl.data.arithmetic import make_arithmetic_rows as old
        from agentrl.data import arithmetic
        from agentrl.tasks.arithmetic import make_arithmetic_rows as new
        import agentrl.tasks.arithmetic
        assert old is new
        assert arithmetic is agentrl.tasks.arithmetic
        from agentrl.trainer.async_trainer import AsyncPPOTrainer, OffPolicyTrainer
        assert AsyncPPOTrainer is OffPolicyTrainer
    """)
    assert proc.returncode == 0, proc.stderr


def test_the_finder_serves_only_the_paths_of_its_table():
    finder = MovedModuleFinder({"agentrl_test_old_name": "json"})
    assert finder.find_spec("json") is None
    assert finder.find_spec("agentrl.trainer") is None
    assert finder.find_spec("agentrl_test_old_name").name == "agentrl_test_old_name"


def test_an_unknown_old_path_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        __import__("agentrl.data.no_such_module")


@pytest.mark.parametrize("module", sorted(RENAMED_NAMES))
def test_renamed_names_keep_their_old_names_with_a_warning(module):
    imported = __import__(module, fromlist=["_"])
    for old, new in RENAMED_NAMES[module].items():
        with pytest.warns(DeprecationWarning, match=f"{module}.{old} is deprecated: it is "
                          f"{module}.{new} now") as caught:  # fmt: skip
            assert getattr(imported, old) is getattr(imported, new)
        assert caught[-1].filename == __file__  # the warning names the line that asked
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        imported.Nope  # noqa: B018


def test_renamed_attributes_takes_an_explicit_table():
    getter = renamed_attributes("agentrl.compat", {"OLD_TABLE": "MOVED_MODULES"})
    with pytest.warns(DeprecationWarning, match="OLD_TABLE is deprecated"):
        assert getter("OLD_TABLE") is MOVED_MODULES


def test_no_old_path_has_a_file_again():
    for old in MOVED_MODULES:
        relative = Path(*old.split(".")[1:])
        assert not (PACKAGE / relative.with_suffix(".py")).exists(), old
        assert not (PACKAGE / relative / "__init__.py").exists(), old


def _is_shim(source: str) -> bool:
    """A module made only of imports, `__all__`, re-export assignments and a deprecation
    warning (a warnings.warn call, or an aliasing helper's call): a per-file shim."""
    body = ast.parse(source).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    warns = False
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            text = ast.unparse(node.value.func)
            if "warn" in text or "moved" in text or "alias" in text or "deprecat" in text:
                warns = True
                continue
            return False
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute,
                                                                    ast.List, ast.Tuple,
                                                                    ast.Call)):  # fmt: skip
            if isinstance(node.value, ast.Call):
                text = ast.unparse(node.value.func)
                if "deprecat" in text or "renamed" in text or "moved" in text:
                    warns = True
                    continue
                return False
            continue
        return False
    return warns


@pytest.mark.parametrize(("source", "shim"), [
    ('"""Deprecated."""\nfrom agentrl.compat import moved\nmoved(__name__, "x")\n', True),
    ("import warnings\nfrom agentrl.tasks.arithmetic import *\n"
     "warnings.warn('moved', DeprecationWarning)\n", True),
    ("from agentrl.tasks import arithmetic\nX = arithmetic.X\n"
     "__getattr__ = renamed_attributes(__name__)\n", True),
    ("from agentrl.tasks.arithmetic import make_arithmetic_rows\n__all__ = ['x']\n", False),
    ("import warnings\ndef f():\n    warnings.warn('old', DeprecationWarning)\n", False),
])
def test_the_shim_detector_tells_a_shim_from_a_module(source, shim):
    assert _is_shim(source) is shim


def test_no_module_of_the_package_is_a_per_file_shim():
    shims = [str(path.relative_to(PACKAGE.parent)) for path in sorted(PACKAGE.rglob("*.py"))
             if _is_shim(path.read_text())]  # fmt: skip
    assert shims == [], f"old paths belong in agentrl/compat.py's MOVED_MODULES: {shims}"


@pytest.mark.parametrize(("override", "old_key", "new_key", "value"), [
    ("async.max_staleness=0", "async", "off_policy.max_staleness", 0),
    ("actor_rollout_ref.rollout.agent_workers=1", "actor_rollout_ref.rollout.agent_workers",
     "actor_rollout_ref.rollout.engine_workers", 1),
])
def test_former_config_keys_are_read_with_a_warning(override, old_key, new_key, value):
    from omegaconf import OmegaConf

    from agentrl.config import load_config

    with pytest.warns(DeprecationWarning, match=f"config key {old_key} is deprecated"):
        cfg = load_config(overrides=["trainer.mode=async", override])
    assert OmegaConf.select(cfg, new_key) == value


def test_a_module_with_renamed_names_still_runs_with_python_dash_m():
    """`python -m` of a module of RENAMED_NAMES: runpy asks the module's loader for its code,
    which the finder's wrapper hands to the module's own loader."""
    done = _run("""
        import agentrl, importlib.util
        spec = importlib.util.find_spec("agentrl.trainer.metrics")
        print(type(spec.loader).__name__, spec.loader.is_package("agentrl.trainer.metrics"),
              spec.loader.get_code("agentrl.trainer.metrics").co_filename.endswith("metrics.py"))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["_ServeRenamedNames", "False", "True"]
    done = subprocess.run([sys.executable, "-m", "agentrl.trainer.metrics"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("old", ["agentrl.algos.registry", "agentrl.rollout.testing",
                                 "agentrl.workers.testing", "agentrl.utils.deprecation"])
def test_old_paths_no_issue_promised_are_gone(old):
    """Nothing has been released: only the old names an issue promised are kept (issue 57)."""
    assert old not in MOVED_MODULES
    with pytest.raises(ModuleNotFoundError):
        __import__(old)


@pytest.mark.parametrize(("module", "old"), [
    ("agentrl.testing.rollout", "ScriptedBackend"), ("agentrl.testing.workers", "worker_config"),
    ("agentrl.rollout.sharded", "AgentWorker"), ("agentrl.gateway.sessions", "normalize_message"),
    ("agentrl.smoke", "prepare"), ("tools.calculator", "format_number"),
])
def test_old_names_no_issue_promised_are_gone(module, old):
    imported = __import__(module, fromlist=["_"])
    assert module not in RENAMED_NAMES
    with pytest.raises(AttributeError, match=f"no attribute '{old}'"):
        getattr(imported, old)
