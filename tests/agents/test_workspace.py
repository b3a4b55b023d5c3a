"""A row -> the episode's workspace files (list or mapping, after a template), its prompt
and its budget; paths that leave the workspace are refused, naming the path."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.agents.workspace import extra_info, make_workspace, prompt_text, row_budget


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
