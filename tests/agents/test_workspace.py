"""A row -> the episode's workspace files (list or mapping, after a template), its prompt,
its budget and what its cage shows; paths that leave the workspace are refused, naming the
path; the check's copy gets the check files over whatever the policy left, never through
its links, and leaves out a fifo."""

from __future__ import annotations

import os

import numpy as np
import pytest

from agentrl.agents.workspace import (
    check_copy,
    extra_info,
    make_workspace,
    prompt_text,
    row_budget,
    row_sandbox,
)


def test_files_come_from_the_template_then_the_row(tmp_path):
    template = tmp_path / "template"
    (template / "src").mkdir(parents=True)
    (template / "src" / "a.py").write_text("old\n")
    (template / "README").write_text("r\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    task = {"extra_info": {"template": str(template), "files": [
        {"path": "src/a.py", "content": "new\n"}, {"path": "d/e/f.txt", "content": None}]}}
    make_workspace(task, workspace)
    assert (workspace / "src" / "a.py").read_text() == "new\n"
    assert (workspace / "README").read_text() == "r\n"
    assert (workspace / "d" / "e" / "f.txt").read_text() == ""
    other = tmp_path / "ws2"
    other.mkdir()
    make_workspace({"extra_info": {"files": {"x.txt": "1", "gone": None}}}, other)
    assert sorted(p.name for p in other.iterdir()) == ["x.txt"]


@pytest.mark.parametrize("path", ["/etc/passwd", "../up.txt", "a/../../b"])
def test_paths_outside_the_workspace_are_refused(tmp_path, path):
    with pytest.raises(ValueError, match="relative path inside"):
        make_workspace({"extra_info": {"files": [{"path": path, "content": "x"}]}}, tmp_path)


def test_bad_rows_are_named(tmp_path):
    with pytest.raises(ValueError, match="no folder"):
        make_workspace({"extra_info": {"template": str(tmp_path / "missing")}}, tmp_path)
    with pytest.raises(ValueError, match="needs 'path'"):
        make_workspace({"extra_info": {"files": ["a.txt"]}}, tmp_path)
    with pytest.raises(ValueError, match="no prompt"):
        prompt_text({"raw_prompt": []})
    with pytest.raises(ValueError, match="mapping"):
        extra_info({"extra_info": "x"})


def test_prompt_puts_system_first_and_budget_reads_the_row():
    messages = np.array([{"role": "user", "content": "Fix it."},
                         {"role": "system", "content": "You are careful."}], dtype=object)
    assert prompt_text({"raw_prompt": messages}) == "You are careful.\n\nFix it."
    assert prompt_text({"prompt": [{"role": "user", "content": "hi"}]}) == "hi"
    task = {"extra_info": {"agent": {"max_turns": 3, "timeout_s": None}}}
    assert row_budget(task) == {"max_turns": 3.0}
    assert row_budget({"extra_info": None}) == {}


def test_the_check_copy_writes_check_files_over_what_the_policy_left(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "test_calc.py").write_text("host file\n")
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "calc.py").write_text("fixed\n")
    (workspace / "test_calc.py").symlink_to(outside / "test_calc.py")  # the policy's traps
    (workspace / "tests").symlink_to(outside)
    os.mkfifo(workspace / "sub" / "pipe")
    task = {"extra_info": {"check_files": {"test_calc.py": "assert True\n",
                                           "tests/test_more.py": "more\n"}}}
    check_copy(task, workspace, tmp_path / "check")
    copy = tmp_path / "check"
    assert (copy / "calc.py").read_text() == "fixed\n"
    assert not (copy / "test_calc.py").is_symlink()
    assert (copy / "test_calc.py").read_text() == "assert True\n"
    assert (copy / "tests").is_dir() and not (copy / "tests").is_symlink()
    assert (copy / "tests" / "test_more.py").read_text() == "more\n"
    assert sorted(p.name for p in outside.iterdir()) == ["test_calc.py"]
    assert (outside / "test_calc.py").read_text() == "host file\n"
    assert not (workspace / "tests" / "test_more.py").exists()  # the policy's side untouched
    assert list((copy / "sub").iterdir()) == []  # the fifo is left out
    with pytest.raises(ValueError, match="check_files: '../x' must be a relative path"):
        check_copy({"extra_info": {"check_files": {"../x": ""}}}, workspace, tmp_path / "c2")


def test_the_row_adds_to_the_cage():
    task = {"extra_info": {"agent": {"ro_binds": np.array(["/data/a"], dtype=object),
                                     "interpreters": ["python3.12"]}}}
    assert row_sandbox(task) == {"ro_binds": ("/data/a",), "interpreters": ("python3.12",)}
    assert row_sandbox({"extra_info": {"agent": {"max_turns": 3}}}) == {}
    with pytest.raises(ValueError, match="ro_binds must be a list"):
        row_sandbox({"extra_info": {"agent": {"ro_binds": "/data/a"}}})
