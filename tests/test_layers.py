"""The import contracts of pyproject.toml hold: agentrl's layers and no import cycles."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_layers_and_acyclic_contracts_are_kept():
    proc = _run(REPO, REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 2 kept, 0 broken." in proc.stdout


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
    shutil.copytree(REPO / "agentrl", tmp_path / "agentrl",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    path = tmp_path / "agentrl" / module
    path.write_text(path.read_text() + f"\n{added}  # noqa\n")
    if module == "utils/command.py":  # the other half of the cycle
        aio = tmp_path / "agentrl" / "utils" / "aio.py"
        aio.write_text(aio.read_text() + "\nimport agentrl.utils.command  # noqa\n")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    proc = _run(tmp_path, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert message in proc.stdout
