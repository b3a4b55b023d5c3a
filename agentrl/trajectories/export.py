"""A run's trajectory dumps -> the open trajectory format (`agentrl trajectories export`).

    summary = export_trajectories("outputs/run", "sessions.jsonl")   # or a dump directory
    summary   # {"sessions": 8, "segments": 16, "policy_tokens": 412, "files": 2, ...}

The input is a run directory (its ``trainer.rollout_data_dir``, or ``validation_data_dir``
with ``source="validation"``; agentrl/report/run_dir.py finds them) or a dump directory
itself (``{step}.jsonl`` files, agentrl/trainer/dump.py). The rows of one agent episode
(one per trained segment: same ``episode_id``) become one session tree, each row one segment
placed by its ``segment`` column; any other row (the engine's own multi-turn rollouts) is a
session of one segment. A segment's tokens are its row's ``prompt_ids`` then
``response_ids``, as the trainer held them: a prompt over ``data.max_prompt_length`` keeps
its end and a response over ``data.max_response_length`` is cut. With
``rollout.agent_segments: last`` only the last segment of a session was trained and dumped,
so its parent is absent from the file; ``metadata.session_segments`` says how many the
session recorded.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from agentrl.report.run_dir import ReportError, load_run, read_log_jsonl
from agentrl.trajectories.format import FORMAT_VERSION, write_trajectories

SOURCES = ("rollouts", "validation")
# dump keys that become segment fields, not session metadata
_SEGMENT_KEYS = {
    "prompt_ids", "response_ids", "loss_mask", "response_tokens", "messages",
    "rollout_log_probs", "rollout_versions", "segment", "episode_row", "finish_reason",
    "input", "output", "episode_id", "step", "score",
}  # fmt: skip
_ROOT_TREE = {"index": 0, "parent": None, "branch_message": 0, "branch_token": 0,
              "side_call": False}  # fmt: skip


class TrajectoryExportError(ValueError):
    """The directory holds no dumps that can be exported (the message says why)."""


def dump_files(run_or_dump_dir: str | Path, source: str = "rollouts") -> list[Path]:
    """The ``{step}.jsonl`` dump files of a dump directory, or of a run directory's
    ``source`` dumps, in step order."""
    if source not in SOURCES:
        raise TrajectoryExportError(f"source {source!r}: choose one of {', '.join(SOURCES)}")
    root = Path(run_or_dump_dir).expanduser()
    if not root.is_dir():
        raise TrajectoryExportError(f"{root} does not exist or is not a directory")
    own = [p for p in root.glob("*.jsonl") if re.fullmatch(r"-?\d+", p.stem)]
    if own:
        return sorted(own, key=lambda p: int(p.stem))
    try:
        files = load_run(root).sources.get(source, [])
    except ReportError as err:
        raise TrajectoryExportError(f"{root} holds no trajectory dumps: {err}") from None
    if not files:
        raise TrajectoryExportError(
            f"{root} holds no {source} dumps ({{step}}.jsonl files; the run needs "
            f"trainer.{'rollout' if source == 'rollouts' else 'validation'}_data_dir)")
    return files


def _segment(row: dict[str, Any], where: str) -> dict[str, Any]:
    """One dump row as a segment of the format."""
    missing = [k for k in ("prompt_ids", "response_ids", "loss_mask") if k not in row]
    if missing:
        raise TrajectoryExportError(f"{where}: a dump row without {', '.join(missing)} "
                                    "(written by an agentrl older than the format)")
    prompt, response = list(row["prompt_ids"]), list(row["response_ids"])
    tree = row.get("segment") or _ROOT_TREE
    pad = [0] * len(prompt)
    log_probs = row.get("rollout_log_probs")
    versions = row.get("rollout_versions")
    return {
        "id": int(tree["index"]),
        "parent": tree["parent"],
        "branch": tree.get("branch"),
        "branch_message": int(tree["branch_message"]),
        "branch_token": int(tree["branch_token"]),
        "side_call": bool(tree["side_call"]),
        "messages": row.get("messages"),
        "prompt_length": len(prompt),
        "token_ids": prompt + response,
        "loss_mask": pad + [int(m) for m in row["loss_mask"]],
        "log_probs": None if log_probs is None else [0.0] * len(prompt) + list(log_probs),
        "policy_versions": None if versions is None else [-1] * len(prompt) + list(versions),
        "finish_reason": row.get("finish_reason"),
    }


def _metadata(row: dict[str, Any], source: str) -> dict[str, Any]:
    """The reward row's keys that are not segment fields (uid, request state, the score
    function's extra keys, ...), plus where the session came from."""
    tree = row.get("segment") or {}
    meta = {k: v for k, v in row.items() if k not in _SEGMENT_KEYS}
    meta.update(source=source, step=row.get("step"),
                session_segments=tree.get("session_segments", 1),
                session_side_calls=tree.get("session_side_calls", 0))  # fmt: skip
    return meta


def sessions_from_rows(rows: list[tuple[str, dict[str, Any]]], source: str) -> list[dict]:
    """The session trees of dump rows (``(where, row)`` pairs, ``where`` naming the file
    and line for errors), in the order their first row came."""
    groups: dict[tuple, list[tuple[str, dict]]] = defaultdict(list)
    ordinal: dict[tuple, int] = defaultdict(int)
    for where, row in rows:
        step = row.get("step")
        if row.get("episode_id") is not None:
            key = (step, str(row["episode_id"]))
        else:  # one session per row: a prompt's n samples share its uid
            uid = str(row.get("uid", "?"))
            key = (step, uid, ordinal[(step, uid)])
            ordinal[(step, uid)] += 1
        groups[key].append((where, row))
    sessions = []
    for key, members in groups.items():
        reward_rows = [row for _, row in members if int(row.get("episode_row") or 0) == 0]
        if len(reward_rows) != 1:
            raise TrajectoryExportError(f"{members[0][0]}: episode {key[1]} of step {key[0]} "
                                        f"has {len(reward_rows)} reward rows (episode_row 0)")
        head = reward_rows[0]
        segments = sorted((_segment(row, where) for where, row in members),
                          key=lambda s: s["id"])  # fmt: skip
        score = head.get("score")
        sessions.append({
            "format_version": FORMAT_VERSION,
            "session_id": "/".join(str(k) for k in (f"step{key[0]}", *key[1:])),
            "reward": float(score) if isinstance(score, int | float) else None,
            "segments": segments,
            "metadata": _metadata(head, source),
        })  # fmt: skip
    return sessions


def export_trajectories(
    run_or_dump_dir: str | Path, out: str | Path, source: str = "rollouts"
) -> dict[str, Any]:
    """Write the session trees of a run's (or a dump directory's) dumps to ``out`` as the
    trajectory format, each checked against it; returns the counts written."""
    files = dump_files(run_or_dump_dir, source)
    rows = [(f"{path} row {i}", row) for path in files
            for i, row in enumerate(read_log_jsonl(path), 1)]  # fmt: skip
    if not rows:
        raise TrajectoryExportError(f"the dumps of {run_or_dump_dir} hold no rows")
    sessions = sessions_from_rows(rows, source)
    written = write_trajectories(out, sessions)
    segments = [s for t in sessions for s in t["segments"]]
    return {"sessions": written, "segments": len(segments),
            "policy_tokens": sum(sum(s["loss_mask"]) for s in segments),
            "files": len(files), "out": str(out)}  # fmt: skip


__all__ = ["SOURCES", "TrajectoryExportError", "dump_files", "export_trajectories",
           "sessions_from_rows"]
