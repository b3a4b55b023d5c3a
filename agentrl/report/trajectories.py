"""Rollout dump rows -> the trajectory viewer's records (plain JSON, embedded in the page).

    records, total = load_source("rollouts", files, max_per_step=16)

Two row formats are read:

- the trainer's dumps (``trainer.rollout_data_dir`` / ``validation_data_dir``, written by
  ``PPOTrainer._dump``): ``step, uid, input, output, score, request_state, prompt_ids,
  response_ids, loss_mask, response_tokens, messages, num_turns, tool_calls,
  finish_reason`` and the score function's extra keys (dumps of older versions hold only
  the first six and the extra keys: the viewer then shows the decoded text);
- `agentrl generate` rows (``eval_*.jsonl``): ``index, sample, messages, input_ids,
  loss_mask, prompt_length, state, num_turns, metrics, score, ...``; their response tokens
  are decoded here with the run's tokenizer when one can be loaded, else shown as ids.

One record per trajectory: ``source, step, id, score, correct, state, turns, tool_calls,
finish, messages, input, output, tokens, mask, extra, session, segment, tree``.
``tokens``/``mask`` are the response's tokens and loss mask (1: trained, the model's own
tokens; 0: tool responses and user turns); padding is never dumped. ``correct`` is
``acc >= 1`` when the score function returns ``acc``, else ``score >= 1`` (None without
either).

Agent mode's rows are segments of a session tree (docs/gateway.md): ``session`` is the
row's ``episode_id``, ``segment`` its place (``index``, ``parent``, ``branch_message``,
``branch_token``, ``side_call``) and ``tree`` the whole session as the viewer draws it
(`session_tree`): every segment of the session the dumps hold, in depth-first order, with
its depth, branch point and trained tokens, a parent no row holds (``agent_segments: last``)
as an entry marked ``dumped: false``. Other rows have None for all three.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.report.run_dir import read_log_jsonl

logger = logging.getLogger(__name__)

Decoder = Callable[[list[int]], list[str]]

# Row keys the record has a field for; every other scalar key goes to ``extra``.
_KNOWN = {
    "step", "uid", "input", "output", "score", "request_state", "prompt_ids", "response_ids",
    "loss_mask", "response_tokens", "messages", "num_turns", "tool_calls", "finish_reason",
    "index", "sample", "input_ids", "rollout_log_probs", "prompt_length", "state",
    "metrics", "reward_scores", "truncation", "episode_id", "episode_row", "segment",
    "rollout_versions", "policy_versions",
}  # fmt: skip
_TREE_KEYS = ("index", "parent", "branch_message", "branch_token", "side_call")


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, int | float) else None


def _tool_call_count(row: dict[str, Any]) -> int:
    """Tool calls the trajectory executed (dump: ``tool_calls``; generate: ``metrics``),
    else the calls its assistant messages hold."""
    calls = row.get("tool_calls")
    if calls is None and isinstance(row.get("metrics"), dict):
        calls = row["metrics"].get("tool_calls")
    if isinstance(calls, dict):
        return int(sum(v for v in calls.values() if isinstance(v, int | float)))
    if isinstance(calls, int | float):
        return int(calls)
    messages = row.get("messages") or []
    return sum(len(m.get("tool_calls") or []) for m in messages if isinstance(m, dict))


def _response(row: dict[str, Any]) -> tuple[list[int], list[int], list[str] | None]:
    """(response ids, loss mask, token strings or None) of either row format."""
    if "response_ids" in row:
        ids, mask = list(row["response_ids"]), list(row.get("loss_mask") or [])
        return ids, mask, row.get("response_tokens")
    if "input_ids" in row and "prompt_length" in row:
        start = int(row["prompt_length"])
        return list(row["input_ids"][start:]), list((row.get("loss_mask") or [])[start:]), None
    return [], [], None


def to_record(row: dict[str, Any], source: str, decode: Decoder | None) -> dict[str, Any]:
    """The viewer record of one dump row (see the module docstring)."""
    ids, mask, tokens = _response(row)
    if ids and (tokens is None or len(tokens) != len(ids)):
        tokens = decode(ids) if decode is not None else [f"[{i}]" for i in ids]
    if len(mask) != len(ids):
        mask = []  # an unaligned mask would colour the wrong tokens
    extra = {
        k: v
        for k, v in row.items()
        if k not in _KNOWN
        and (isinstance(v, int | float | bool) or (isinstance(v, str) and len(v) < 200))
    }
    score = _number(row.get("score"))
    judged = _number(extra.get("acc")) if "acc" in extra else score
    ident = str(row["uid"]) if "uid" in row else f"{row.get('index', '?')}/{row.get('sample', 0)}"
    return {
        "source": source,
        "step": row.get("step") if isinstance(row.get("step"), int) else None,
        "id": ident,
        "score": score,
        "correct": None if judged is None else judged >= 1.0,
        "state": row.get("request_state", row.get("state")),
        "turns": row.get("num_turns"),
        "tool_calls": _tool_call_count(row),
        "finish": row.get("finish_reason"),
        "messages": row.get("messages") if isinstance(row.get("messages"), list) else None,
        "input": row.get("input"),
        "output": row.get("output"),
        "tokens": tokens if ids else None,
        "mask": [int(bool(m)) for m in mask] if ids else None,
        "extra": extra,
        "session": str(row["episode_id"]) if row.get("episode_id") is not None else None,
        "segment": _segment_of(row),
        "tree": None,  # load_source fills it for a session's segments
    }


def _segment_of(row: dict[str, Any]) -> dict[str, Any] | None:
    """A row's place in its session tree, with its token counts; None outside agent mode."""
    tree = row.get("segment")
    if row.get("episode_id") is None or not isinstance(tree, dict):
        return None
    mask = row.get("loss_mask") or []
    return {**{k: tree.get(k) for k in _TREE_KEYS}, "dumped": True,
            "trained": int(sum(1 for m in mask if m)), "tokens": len(mask),
            "prompt": len(row.get("prompt_ids") or [])}  # fmt: skip


def session_tree(segments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A session's segments (`_segment_of`) in depth-first order (children by index), each
    with its ``depth``; a parent no segment holds becomes an entry with ``dumped: False``."""
    by_index = {s["index"]: s for s in segments}
    for s in segments:
        parent = s["parent"]
        if parent is not None and parent not in by_index:
            by_index[parent] = {"index": parent, "parent": None, "dumped": False}
    children: dict[Any, list[int]] = defaultdict(list)
    for index, s in by_index.items():
        children[s["parent"]].append(index)
    ordered: list[dict[str, Any]] = []

    def visit(index: int, depth: int) -> None:
        ordered.append({**by_index[index], "depth": depth})
        for child in sorted(children.get(index, [])):
            visit(child, depth + 1)

    for root in sorted(children.get(None, [])):
        visit(root, 0)
    return ordered


def load_source(
    name: str, files: list[Path], max_per_step: int, decode: Decoder | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The records of one viewer source, at most ``max_per_step`` per step (the first ones),
    and how many trajectories the files hold (`truncation_line` says what was left out)."""
    kept: list[dict[str, Any]] = []
    per_step: dict[Any, int] = defaultdict(int)
    sessions: dict[tuple, list[dict[str, Any]]] = defaultdict(list)  # every row's, kept or not
    total = 0
    for path in files:
        for row in read_log_jsonl(path):
            total += 1
            step = row.get("step")
            segment = _segment_of(row)
            if segment is not None:
                sessions[(step, str(row["episode_id"]))].append(segment)
            if per_step[step] >= max_per_step:
                continue
            per_step[step] += 1
            kept.append(to_record(row, name, decode))
    trees = {key: session_tree(segments) for key, segments in sessions.items()}
    for record in kept:
        if record["session"] is not None:
            record["tree"] = trees.get((record["step"], record["session"]))
    return kept, total


def truncation_line(counts: dict[str, tuple[int, int]], max_per_step: int) -> str | None:
    """One line for every source the viewer cut (``counts``: source -> (shown, total)), or
    None when it shows everything."""
    cut = {name: c for name, c in counts.items() if c[0] < c[1]}
    if not cut:
        return None
    parts = ", ".join(f"{name} {shown:,} of {total:,}" for name, (shown, total) in cut.items())
    return (
        f"The viewer shows the first {max_per_step} trajectories of each step and source "
        f"({parts}); agentrl report RUN_DIR --max-per-step N shows more."
    )


def needs_decoder(files: list[Path]) -> bool:
    """Whether rows of these files carry token ids without token strings (checks the first
    row of the first file only, they are all written the same way)."""
    for path in files[:1]:
        for row in read_log_jsonl(path)[:1]:
            return "input_ids" in row or ("response_ids" in row and "response_tokens" not in row)
    return False


def load_decoder(config: dict[str, Any]) -> Decoder | None:
    """Decode ids one by one with the run's tokenizer (``data.tokenizer``, else
    ``actor_rollout_ref.model.path`` of the saved config); None when it cannot be loaded."""
    path = (config.get("data") or {}).get("tokenizer") or (
        (config.get("actor_rollout_ref") or {}).get("model") or {}
    ).get("path")
    if not path or not Path(str(path)).is_dir():
        logger.info("no local tokenizer in the run's config: token ids are shown as numbers")
        return None
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as err:
        logger.warning(
            "could not load the tokenizer %s (%s): token ids shown as numbers", path, err
        )
        return None

    def decode(ids: list[int]) -> list[str]:
        return tokenizer.batch_decode([[i] for i in ids], clean_up_tokenization_spaces=False)

    return decode
