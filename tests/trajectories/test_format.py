"""The trajectory format's checks: the shipped JSON Schema and the rules beyond it each
refuse a broken trajectory with a message naming the field; files are read line by line."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

import agentrl.trajectories
from agentrl.trajectories import (
    TrajectoryFormatError,
    check_trajectory,
    read_trajectories,
    trained_segments,
    trajectory_schema,
    write_trajectories,
)

SCHEMA_FILE = Path(agentrl.trajectories.__file__).parent / "schema" / "trajectory.schema.json"


def tree() -> dict:
    """A session of two segments: the second branches from the first at message 1 and its
    first 3 tokens; prompts and the tool result have loss mask 0."""
    return {
        "format_version": 1, "session_id": "s0", "reward": 1.0, "metadata": {"step": 1},
        "segments": [
            {"id": 0, "parent": None, "branch_message": 0, "branch_token": 0, "side_call": False,
             "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
             "prompt_length": 3, "token_ids": [1, 2, 3, 10, 11, 4, 5, 12],
             "loss_mask": [0, 0, 0, 1, 1, 0, 0, 1],
             "log_probs": [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3],
             "policy_versions": [-1, -1, -1, 0, 0, -1, -1, 1], "finish_reason": "stop"},
            {"id": 1, "parent": 0, "branch_message": 1, "branch_token": 3, "side_call": False,
             "messages": None, "prompt_length": 4, "token_ids": [1, 2, 3, 6, 13],
             "loss_mask": [0, 0, 0, 0, 1], "log_probs": None, "policy_versions": None},
        ],
    }  # fmt: skip


def test_a_valid_tree_passes_both_checks_and_the_schema_file_is_the_shipped_one():
    check_trajectory(tree())
    assert trajectory_schema() == json.loads(SCHEMA_FILE.read_text())
    jsonschema.validate(tree(), trajectory_schema())  # the schema alone, as another reader would use it


@pytest.mark.parametrize(("path", "value", "says"), [
    (("format_version",), 2, "format_version: 1 was expected"),
    (("segments", 0, "loss_mask", 4), 2, "segments[0].loss_mask[4]: 2 is not one of [0, 1]"),
    (("segments", 1, "parent"), "0", "segments[1].parent: '0' is not of type"),
    (("segments", 0, "token_ids"), [], "segments[0].token_ids: [] should be non-empty"),
    (("segments", 1, "log_probs"), [0.0], "segments[1].log_probs has 1 entries for 5 token_ids"),
    (("segments", 0, "loss_mask", 1), 1, "segments[0].loss_mask is 1 inside the prompt"),
    (("segments", 1, "prompt_length"), 9, "segments[1].prompt_length 9 is over its 5 token_ids"),
    (("segments", 1, "id"), 0, "segments[1].id 0 is used by an earlier segment"),
    (("segments", 1, "parent"), 1, "segments[1].parent 1: a parent's id is smaller"),
    (("segments", 1, "side_call"), True, "a side call has none"),
    (("segments", 1, "branch"), "merge", "segments[1].branch: 'merge' is not one of"),
    (("extra",), 1, "Additional properties are not allowed ('extra' was unexpected)"),
])  # fmt: skip
def test_each_broken_field_is_named(path, value, says):
    broken = copy.deepcopy(tree())
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(TrajectoryFormatError) as raised:
        check_trajectory(broken)
    assert says in str(raised.value)


def test_files_are_written_checked_and_read_back_naming_the_bad_line(tmp_path):
    path = tmp_path / "t.jsonl"
    second = tree() | {"session_id": "s1"}
    assert write_trajectories(path, [tree(), second]) == 2
    assert read_trajectories(path) == [tree(), second]
    bad = copy.deepcopy(second)
    bad["segments"][0]["loss_mask"] = bad["segments"][0]["loss_mask"][:-1]
    path.write_text(json.dumps(tree()) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TrajectoryFormatError, match=r"t.jsonl line 2 does not match the "
                       r"trajectory format: segments\[0\].loss_mask has 7 entries for 8"):
        read_trajectories(path)
    path.write_text(json.dumps(tree()) + "\n" + json.dumps(tree()) + "\n")
    with pytest.raises(TrajectoryFormatError, match="session ids repeat"):
        read_trajectories(path)
    path.write_text("{not json\n")
    with pytest.raises(TrajectoryFormatError, match="line 1 is not JSON"):
        read_trajectories(path)
    with pytest.raises(TrajectoryFormatError, match="does not exist"):
        read_trajectories(tmp_path / "nope.jsonl")


def test_trained_segments_are_the_segments_with_a_policy_token():
    quiet = copy.deepcopy(tree())
    quiet["segments"][1]["loss_mask"] = [0] * 5
    assert [name for name, _, _ in trained_segments([tree()])] == ["s0#0", "s0#1"]
    assert [(n, m) for n, _, m in trained_segments([quiet])] == [
        ("s0#0", [0, 0, 0, 1, 1, 0, 0, 1])]
