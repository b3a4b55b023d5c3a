"""agentrl/utils/contract.py: require raises AssertionError with the message, under -O too."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentrl.utils.contract import require


def test_require_passes_a_true_condition_and_names_a_false_one():
    require(1, "never raised")
    with pytest.raises(AssertionError, match="create\\(\\) gave no instance id"):
        require("", "create() gave no instance id")


def test_require_holds_under_python_minus_O():
    code = "from agentrl.utils.contract import require\nrequire(False, 'still checked')"
    proc = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 1 and "AssertionError: still checked" in proc.stderr
