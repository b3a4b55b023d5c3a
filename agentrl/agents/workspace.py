"""A harness episode's task, read from its dataset row: workspace files, prompt, check, budget.

A row (verl's format) for the harness agents::

    prompt: [{"role": "user", "content": "Make the test in test_calc.py pass."}]
    reward_model: {"style": "rule", "ground_truth": ...}       # used when there is no check
    extra_info:
      files: [{"path": "calc.py", "content": "..."}, ...]      # or {"calc.py": "...", ...}
      template: /data/tasks/calc                               # a folder copied first (optional)
      check: "python -m pytest -q test_calc.py"                # run in the workspace afterwards
      check_timeout_s: 60
      agent: {max_turns: 8, timeout_s: 120}                    # this row's budget (optional)

``files`` is a list of ``{path, content}`` records (what parquet keeps as it is) or a mapping
of path to content; paths are relative and stay inside the workspace (``..`` or an absolute
path is a ``ValueError`` naming it). The prompt the CLI gets is the row's messages'
contents, system first, joined by blank lines.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any


def _as_dict(value: Any) -> dict:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    raise ValueError(f"extra_info must be a mapping, got {type(value).__name__}")


def extra_info(task: Mapping[str, Any]) -> dict:
    """The row's ``extra_info`` as a dict (missing or null: empty)."""
    return _as_dict(task.get("extra_info"))


def _files(spec: Any) -> list[tuple[str, str]]:
    if spec is None:
        return []
    if isinstance(spec, Mapping):
        return [(str(k), "" if v is None else str(v)) for k, v in spec.items() if v is not None]
    records = []
    for record in spec:
        if not isinstance(record, Mapping) or "path" not in record:
            raise ValueError(f"extra_info.files: each entry needs 'path' and 'content', got {record!r}")
        records.append((str(record["path"]), str(record.get("content") or "")))
    return records


def _inside(root: Path, relative: str) -> Path:
    parts = PurePosixPath(relative)
    if parts.is_absolute() or ".." in parts.parts or not parts.parts:
        raise ValueError(f"extra_info.files: {relative!r} must be a relative path inside "
                         "the workspace")
    return root.joinpath(*parts.parts)


def make_workspace(task: Mapping[str, Any], workspace: Path) -> None:
    """Fill the empty folder ``workspace`` from the row: the template folder, then the files."""
    info = extra_info(task)
    template = info.get("template")
    if template:
        source = Path(str(template))
        if not source.is_dir():
            raise ValueError(f"extra_info.template: no folder {str(source)!r}")
        shutil.copytree(source, workspace, dirs_exist_ok=True, symlinks=True)
    for relative, content in _files(info.get("files")):
        path = _inside(workspace, relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")


def prompt_text(task: Mapping[str, Any]) -> str:
    """The text the CLI is started with: the row's messages, system first."""
    rows = task.get("raw_prompt")
    if rows is None:
        rows = task.get("prompt")
    messages = [dict(m) for m in (rows if rows is not None else [])]
    ordered = ([m for m in messages if m.get("role") == "system"]
               + [m for m in messages if m.get("role") != "system"])
    text = "\n\n".join(str(m.get("content") or "") for m in ordered).strip()
    if not text:
        raise ValueError("the row has no prompt text (raw_prompt / prompt)")
    return text


def row_budget(task: Mapping[str, Any]) -> dict[str, float]:
    """The row's own ``max_turns`` / ``timeout_s`` (``extra_info.agent``), where set."""
    agent = _as_dict(extra_info(task).get("agent"))
    return {key: float(agent[key]) for key in ("max_turns", "timeout_s")
            if agent.get(key) is not None}


__all__ = ["extra_info", "make_workspace", "prompt_text", "row_budget"]
