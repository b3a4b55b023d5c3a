"""Every command's module runs with `python -m` (verl users run `python -m ...main_ppo`):
`python -m MODULE --help` prints the command's usage, and verl's module name works too."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentrl.cli import COMMANDS

MODULES = [(module, name) for name, (module, _) in COMMANDS.items()]
MODULES.append(("agentrl.trainer.main_ppo", "train"))


@pytest.mark.slow
@pytest.mark.parametrize("module,command", MODULES, ids=[m for m, _ in MODULES])
def test_python_dash_m_runs_the_command(module, command):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: agentrl {command}") or (
        done.stdout.startswith("usage: python -m")  # the servers' own parsers
    ), done.stdout[:300]
