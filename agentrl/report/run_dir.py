"""Find and read what a run directory holds, for `agentrl report`.

    run = load_run("outputs/smoke")     # RunInputs; ReportError when it is not a run
    run.metrics                         # [{"step": N, ...}] from metrics.jsonl, by step
    run.sources                         # {"rollouts": [jsonl files], "eval_rl": [...], ...}

Two layouts are read:

- an `agentrl train` run: ``trainer.default_local_dir``, holding ``metrics.jsonl`` (the
  ``file`` tracking backend), ``config.yaml`` (the resolved config the trainer saves at the
  start of ``fit``), ``global_step_N/`` checkpoints, and the rollout dumps of
  ``trainer.rollout_data_dir`` / ``trainer.validation_data_dir`` (one ``{step}.jsonl`` each;
  ``rollouts/`` and ``validation/`` in the run directory when the config names none);
- a quickstart output directory: ``report.json`` (evaluations and stage timings),
  ``eval_*.jsonl`` (greedy held-out rollouts written by `agentrl generate`) and ``rl/``, the
  RL run directory above, used when the directory has no ``metrics.jsonl`` of its own.

Nothing here needs the run to be finished: a jsonl line cut short by a killed run is
skipped with a warning, and whatever is missing becomes a note on the page.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

logger = logging.getLogger(__name__)

LOOKED_FOR = (
    "metrics.jsonl",
    "report.json",
    "rl/metrics.jsonl",
    "rollout dumps (trainer.rollout_data_dir, default rollouts/*.jsonl)",
    "global_step_*/ checkpoints",
)
NO_DUMPS_HINT = "set trainer.rollout_data_dir to see trajectories"


class ReportError(ValueError):
    """The directory cannot be reported on (it does not exist or is not a run)."""


@dataclass
class RunInputs:
    """What `load_run` found; ``notes`` are shown at the top of the page."""

    root: Path
    train_dir: Path  # the `agentrl train` run directory (root, or root/rl)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)  # report.json
    sources: dict[str, list[Path]] = field(default_factory=dict)  # viewer source -> jsonl
    checkpoints: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_log_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of ``path``, one per line; lines that do not parse (a last line
    cut short by a killed run) are skipped with a warning."""
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            where = "last line" if number == len(lines) else f"line {number}"
            logger.warning("%s: skipped the %s, which is not complete JSON", path, where)
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _step_of(path: Path) -> int:
    match = re.fullmatch(r"(-?\d+)", path.stem)
    return int(match.group(1)) if match else 1 << 30


def _dump_files(directory: Path | None) -> list[Path]:
    """The ``{step}.jsonl`` files of a dump directory, in step order."""
    if directory is None or not directory.is_dir():
        return []
    return sorted(directory.glob("*.jsonl"), key=lambda p: (_step_of(p), p.name))


def _merge_by_step(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per step (later rows win per key), sorted by step."""
    merged: dict[int, dict[str, Any]] = {}
    for row in rows:
        step = row.get("step")
        if isinstance(step, int | float):
            merged.setdefault(int(step), {}).update(row)
    return [merged[step] | {"step": step} for step in sorted(merged)]


def _read_config(train_dir: Path) -> dict[str, Any]:
    path = train_dir / "config.yaml"
    if not path.is_file():
        return {}
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        logger.warning("%s is not valid YAML (%s); using the default dump paths", path, err)
        return {}
    return config if isinstance(config, dict) else {}


def _dump_dir(config: dict[str, Any], key: str, train_dir: Path, default: str) -> Path:
    """``trainer.<key>`` of the saved config (relative paths from the run directory), or
    ``train_dir/default`` when the key is null or names a directory that is gone (a run
    directory copied elsewhere)."""
    value = (config.get("trainer") or {}).get(key)
    fallback = train_dir / default
    if not value:
        return fallback
    path = Path(str(value))
    path = path if path.is_absolute() else train_dir / path
    return path if path.is_dir() or not fallback.is_dir() else fallback


def _read_evaluation(root: Path, notes: list[str]) -> dict[str, Any]:
    path = root / "report.json"
    if not path.is_file():
        return {}
    try:
        evaluation = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        notes.append(f"{path} is not valid JSON ({err}); its evaluations are left out")
        logger.warning(notes[-1])
        return {}
    return evaluation if isinstance(evaluation, dict) else {}


def load_run(run_dir: str | Path) -> RunInputs:
    """Locate and read the inputs of the report (see the module docstring).

    Raises ReportError when ``run_dir`` does not exist or holds none of ``LOOKED_FOR``."""
    root = Path(run_dir).expanduser().resolve()
    if not root.is_dir():
        raise ReportError(f"{root} is not a directory (agentrl report needs a run directory)")
    own_metrics = (root / "metrics.jsonl").is_file()
    train_dir = root / "rl" if not own_metrics and (root / "rl").is_dir() else root
    run = RunInputs(root=root, train_dir=train_dir)
    run.config = _read_config(train_dir)
    run.evaluation = _read_evaluation(root, run.notes)
    rollout_dir = _dump_dir(run.config, "rollout_data_dir", train_dir, "rollouts")
    validation_dir = _dump_dir(run.config, "validation_data_dir", train_dir, "validation")
    for name, directory in (("rollouts", rollout_dir), ("validation", validation_dir)):
        files = _dump_files(directory)
        if files:
            run.sources[name] = files
    for path in sorted(root.glob("eval_*.jsonl")):
        run.sources[path.stem] = [path]
    run.checkpoints = sorted(
        int(p.name.removeprefix("global_step_"))
        for p in train_dir.glob("global_step_*")
        if p.is_dir() and p.name.removeprefix("global_step_").isdigit()
    )
    metrics_path = train_dir / "metrics.jsonl"
    is_run = (
        metrics_path.is_file()
        or bool(run.evaluation)
        or (root / "report.json").is_file()
        or "rollouts" in run.sources
        or bool(run.checkpoints)
    )
    if not is_run:
        raise ReportError(
            f"{root} is not an agentrl run directory: found none of "
            + ", ".join(LOOKED_FOR)
            + " (run `agentrl train` with trainer.default_local_dir=DIR and "
            "trainer.logger=[console,file], then `agentrl report DIR`)"
        )
    if metrics_path.is_file():
        run.metrics = _merge_by_step(read_log_jsonl(metrics_path))
        if not run.metrics:
            run.notes.append(f"{metrics_path} holds no complete step yet: no training curves")
            logger.warning(run.notes[-1])
    else:
        run.notes.append(
            f"no metrics.jsonl in {train_dir} (the run logged no step yet, or "
            "trainer.logger lacks 'file'): no training curves"
        )
        logger.warning(run.notes[-1])
    if "rollouts" not in run.sources:
        run.notes.append(f"no rollout dumps found in {rollout_dir}: {NO_DUMPS_HINT}")
        logger.warning(run.notes[-1])
    return run
