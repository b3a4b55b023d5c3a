"""The shell tasks: deterministic rows that survive parquet, and checks that pass on a
solved workspace and fail on the untouched one (run with bash in the check's copy of the
workspace, where the check files are); the hidden test is not in the policy's workspace
and a test the policy plants is replaced."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from agentrl.agents.workspace import check_copy, make_workspace
from agentrl.tasks.shell_tasks import (
    KINDS,
    OPERATIONS,
    make_shell_task_rows,
    write_shell_task_dataset,
)


def _fix(row: dict, workspace: Path) -> None:
    calc = workspace / "calc.py"
    name = calc.read_text().split()[1].split("(")[0]
    right, wrong = OPERATIONS[name]
    calc.write_text(calc.read_text().replace(f"a {wrong} b", f"a {right} b"))


SOLUTIONS = {
    "create_file": lambda row, ws: (ws / row["prompt"][0]["content"].split()[4]).write_text(
        row["prompt"][0]["content"].split(": ", 1)[1] + "\n"),
    "count_lines": lambda row, ws: (ws / "count.txt").write_text(
        f"{len((ws / 'data.txt').read_text().splitlines())}\n"),
    "fix_bug": _fix,
}


def _check(row: dict, workspace: Path) -> int:
    copy = workspace.with_name(workspace.name + "-check")
    shutil.rmtree(copy, ignore_errors=True)
    check_copy(row, workspace, copy)
    return subprocess.run(["bash", "-c", row["extra_info"]["check"]], cwd=copy,
                          capture_output=True).returncode


def test_rows_are_deterministic_and_cycle_the_kinds():
    rows = make_shell_task_rows(6, "train", seed=1)
    assert rows == make_shell_task_rows(6, "train", seed=1)
    assert rows != make_shell_task_rows(6, "test", seed=1)
    assert [r["extra_info"]["kind"] for r in rows] == list(KINDS) * 2
    with pytest.raises(ValueError, match=">= 1"):
        make_shell_task_rows(0, "train", 0)


def test_checks_fail_untouched_and_pass_solved_also_after_parquet(tmp_path):
    train, _ = write_shell_task_dataset(tmp_path / "data", 9, 3, seed=0)
    frame = pd.read_parquet(train)
    assert len(frame) == 9
    for k, row in enumerate(frame.to_dict("records")):
        workspace = tmp_path / f"ws{k}"
        workspace.mkdir()
        make_workspace(row, workspace)
        assert _check(row, workspace) != 0, row["extra_info"]["kind"]
        SOLUTIONS[row["extra_info"]["kind"]](row, workspace)
        assert _check(row, workspace) == 0, row["extra_info"]["kind"]
    # the test is hidden, and one the policy plants is replaced by the check's own
    row = frame.to_dict("records")[2]
    workspace = tmp_path / "cheat"
    workspace.mkdir()
    make_workspace(row, workspace)
    assert sorted(p.name for p in workspace.iterdir()) == ["calc.py"]
    (workspace / "test_calc.py").write_text("print('ok')\n")
    assert _check(row, workspace) != 0


@pytest.mark.parametrize("planted", [
    "import os\nos._exit(0)\n",  # ends the check's process with 0 when imported
    "import sys\nsys.exit(0)\n",
    # reads the hidden test for its answers and prints them
    "import glob, re, sys\nfor p in glob.glob('*.py'):\n    t = open(p).read()\n"
    "    m = re.search(r'EXPECTED = (\\[.*\\])', t)\n    if m: print(m.group(1)); sys.exit(0)\n",
], ids=["os_exit", "sys_exit", "reads_the_test"])
def test_a_fix_bug_check_is_not_fooled_by_the_policys_code(tmp_path, planted):
    """The policy's calc.py runs in a child of the hidden test, with the test's file gone:
    ending the process with status 0 or reading the test for its answers fails the check,
    and planted modules do not shadow what the test imports (python3 -I)."""
    row = make_shell_task_rows(3, "train", seed=0)[2]
    assert row["extra_info"]["kind"] == "fix_bug"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    make_workspace(row, workspace)
    (workspace / "calc.py").write_text(planted)
    assert _check(row, workspace) != 0
    make_workspace(row, workspace)  # a fresh calc.py, fixed, beside planted stdlib shadows
    _fix(row, workspace)
    (workspace / "json.py").write_text("import os\nos._exit(0)\n")
    (workspace / "subprocess.py").write_text("import os\nos._exit(0)\n")
    assert _check(row, workspace) == 0
    (workspace / "calc.py").write_text(planted)
    assert _check(row, workspace) != 0
