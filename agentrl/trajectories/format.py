"""The open trajectory format: one agent session tree per JSON line (docs/trajectories.md).

    trajectories = read_trajectories("sessions.jsonl")   # checked; TrajectoryFormatError names
    check_trajectory(trajectory)                         # the line and the field at fault
    write_trajectories("out.jsonl", trajectories)
    for name, token_ids, loss_mask in trained_segments(trajectories): ...

A trajectory is checked in two passes: the JSON Schema that ships with the package
(``schema/trajectory.schema.json``, `trajectory_schema()`), then what a schema cannot say: a segment's
per-token lists are as long as its ``token_ids``, its prompt trains nothing, segment ids are
unique and a parent's id is smaller than its child's (side calls have none).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

FORMAT_VERSION = 1
PER_TOKEN = ("loss_mask", "log_probs", "policy_versions")  # aligned with token_ids (or null)


class TrajectoryFormatError(ValueError):
    """A trajectory or a file that does not match the format (the message says where)."""


@cache
def trajectory_schema() -> dict[str, Any]:
    """The JSON Schema of one trajectory, as shipped in the package."""
    text = (resources.files("agentrl.trajectories") / "schema" / "trajectory.schema.json")
    return json.loads(text.read_text(encoding="utf-8"))


@cache
def _validator() -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(trajectory_schema())
    return cls(trajectory_schema())


def _where(path: Iterable[Any]) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in path]
    return "".join(parts).lstrip(".") or "the object"


def check_trajectory(trajectory: Any) -> None:
    """Raise TrajectoryFormatError naming the first field of ``trajectory`` that breaks the
    schema or the rules beyond it (module docstring)."""
    error = jsonschema.exceptions.best_match(_validator().iter_errors(trajectory))
    if error is not None:
        raise TrajectoryFormatError(f"{_where(error.absolute_path)}: {error.message}")
    seen: set[int] = set()
    for i, segment in enumerate(trajectory["segments"]):
        where = f"segments[{i}]"
        n = len(segment["token_ids"])
        for key in PER_TOKEN:
            values = segment[key]
            if values is not None and len(values) != n:
                raise TrajectoryFormatError(
                    f"{where}.{key} has {len(values)} entries for {n} token_ids")
        if segment["prompt_length"] > n:
            raise TrajectoryFormatError(
                f"{where}.prompt_length {segment['prompt_length']} is over its {n} token_ids")
        if any(segment["loss_mask"][: segment["prompt_length"]]):
            raise TrajectoryFormatError(f"{where}.loss_mask is 1 inside the prompt "
                                        f"(the first {segment['prompt_length']} tokens)")
        ident, parent = segment["id"], segment["parent"]
        if ident in seen:
            raise TrajectoryFormatError(f"{where}.id {ident} is used by an earlier segment")
        seen.add(ident)
        if parent is not None and (segment["side_call"] or parent >= ident):
            raise TrajectoryFormatError(
                f"{where}.parent {parent}: a parent's id is smaller than its child's ({ident}) "
                "and a side call has none")


def read_trajectories(path: str | Path) -> list[dict[str, Any]]:
    """The checked trajectories of a ``.jsonl`` file, one per non-empty line."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise TrajectoryFormatError(f"{path} does not exist or is not a file")
    trajectories = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                trajectory = json.loads(line)
                check_trajectory(trajectory)
            except json.JSONDecodeError as err:
                raise TrajectoryFormatError(f"{path} line {number} is not JSON ({err})") from None
            except TrajectoryFormatError as err:
                raise TrajectoryFormatError(
                    f"{path} line {number} does not match the trajectory format: {err}") from None
            trajectories.append(trajectory)
    if not trajectories:
        raise TrajectoryFormatError(f"{path} holds no trajectory")
    ids = [t["session_id"] for t in trajectories]
    if len(set(ids)) != len(ids):
        raise TrajectoryFormatError(f"{path}: session ids repeat (each must be unique)")
    return trajectories


def write_trajectories(path: str | Path, trajectories: Iterable[dict[str, Any]]) -> int:
    """Write ``trajectories`` to ``path``, one JSON line each, checking each first; returns
    how many were written."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for trajectory in trajectories:
            check_trajectory(trajectory)
            f.write(json.dumps(trajectory) + "\n")
            count += 1
    return count


def trained_segments(
    trajectories: Sequence[dict[str, Any]],
) -> Iterator[tuple[str, list[int], list[int]]]:
    """``(name, token_ids, loss_mask)`` of every segment with a loss-mask-1 token, named
    ``{session_id}#{segment id}``: what SFT trains on."""
    for trajectory in trajectories:
        for segment in trajectory["segments"]:
            if any(segment["loss_mask"]):
                yield (f"{trajectory['session_id']}#{segment['id']}", list(segment["token_ids"]),
                       list(segment["loss_mask"]))


__all__ = ["FORMAT_VERSION", "TrajectoryFormatError", "check_trajectory", "read_trajectories",
           "trained_segments", "trajectory_schema", "write_trajectories"]
