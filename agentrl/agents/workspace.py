"""A harness episode's task, read from its dataset row: workspace files, prompt, check, budget.

A row (verl's format) for the harness agents::

    prompt: [{"role": "user", "content": "Make the test in test_calc.py pass."}]
    reward_model: {"style": "rule", "ground_truth": ...}       # used when there is no check
    extra_info:
      files: [{"path": "calc.py", "content": "..."}, ...]      # or {"calc.py": "...", ...}
      template: /data/tasks/calc                               # a folder copied first (optional)
      check: "python -m pytest -q test_calc.py"                # run in the workspace afterwards
      check_files: [{"path": "test_calc.py", "content": "..."}]  # only the check sees them
      check_timeout_s: 60
      agent: {max_turns: 8, timeout_s: 120,                    # this row's budget (optional)
              ro_binds: [/data/corpus], interpreters: [python3.12],  # what its cage shows
              image: localhost/tasks-py:1}                     # its container (sandbox=container)

``files`` and ``check_files`` are lists of ``{path, content}`` records (what parquet keeps
as it is) or mappings of path to content; paths are relative and stay inside the workspace
(``..`` or an absolute path is a ``ValueError`` naming it). ``check_files`` are written
into a copy of the workspace made after the CLI's processes are dead (``check_copy``),
over whatever the policy left at those paths, and never into the policy's workspace. The
prompt the CLI gets is the row's messages' contents, system first, joined by blank lines.
"""

from __future__ import annotations

import os
import shutil
import stat
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


def _files(spec: Any, key: str = "files") -> list[tuple[str, str]]:
    if spec is None:
        return []
    if isinstance(spec, Mapping):
        return [(str(k), "" if v is None else str(v)) for k, v in spec.items() if v is not None]
    records = []
    for record in spec:
        if not isinstance(record, Mapping) or "path" not in record:
            raise ValueError(f"extra_info.{key}: each entry needs 'path' and 'content', "
                             f"got {record!r}")
        records.append((str(record["path"]), str(record.get("content") or "")))
    return records


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)


def _write_inside(root: Path, relative: str, content: str, key: str) -> None:
    """Write ``content`` at ``root/relative``, never through a link: a symlink or a file in
    the way (what a policy may have left) is removed first, so nothing lands outside."""
    parts = PurePosixPath(relative)
    if parts.is_absolute() or ".." in parts.parts or not parts.parts:
        raise ValueError(f"extra_info.{key}: {relative!r} must be a relative path inside "
                         "the workspace")
    folder = root
    for name in parts.parts[:-1]:
        folder = folder / name
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            _remove(folder)
        folder.mkdir(exist_ok=True)
    path = folder / parts.parts[-1]
    if path.is_symlink() or path.exists():
        _remove(path)
    path.write_text(content, encoding="utf-8")


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
        _write_inside(workspace, relative, content, "files")


def _copy_regular(source: str, target: str) -> None:
    """Regular files only: a fifo or a device the policy made is left out (reading a fifo
    would hang the copy)."""
    if stat.S_ISREG(os.lstat(source).st_mode):
        shutil.copy2(source, target)


def check_copy(task: Mapping[str, Any], workspace: Path, target: Path) -> None:
    """``target`` (absent): a copy of ``workspace`` (links kept as links, special files
    left out), then the row's ``check_files`` written over it."""
    shutil.copytree(workspace, target, symlinks=True, copy_function=_copy_regular)
    for relative, content in _files(extra_info(task).get("check_files"), "check_files"):
        _write_inside(target, relative, content, "check_files")


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


def row_sandbox(task: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """What the row's cage shows besides the defaults (``extra_info.agent``): ``ro_binds``
    (host paths) and ``interpreters`` (programs on the host's PATH, or paths)."""
    agent = _as_dict(extra_info(task).get("agent"))
    found = {}
    for key in ("ro_binds", "interpreters"):
        value = agent.get(key)
        if value is None:
            continue
        if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
            raise ValueError(f"extra_info.agent.{key} must be a list of strings, got {value!r}")
        found[key] = tuple(str(v) for v in value)
    return found


def row_image(task: Mapping[str, Any]) -> str | None:
    """The container image the row names (``extra_info.agent.image``), else None."""
    image = _as_dict(extra_info(task).get("agent")).get("image")
    if image is not None and not isinstance(image, str):
        raise ValueError(f"extra_info.agent.image must be a string, got {image!r}")
    return image or None


__all__ = ["check_copy", "extra_info", "make_workspace", "prompt_text", "row_budget",
           "row_image", "row_sandbox"]
