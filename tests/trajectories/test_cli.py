"""`agentrl trajectories`: export writes a dump directory's sessions and says how many;
validate passes a good file; every refusal is one line on stderr naming what is wrong, exit
status 2, nothing written."""

from __future__ import annotations

import json

from agentrl.cli import main
from agentrl.trajectories import read_trajectories

ROW = {"step": 1, "uid": "1-0", "score": 1.0, "prompt_ids": [5, 6], "response_ids": [7, 8, 9],
       "loss_mask": [1, 0, 1], "rollout_log_probs": [-0.5, 0.0, -0.25],
       "rollout_versions": [0, -1, 0], "messages": [{"role": "user", "content": "q"}],
       "finish_reason": "stop", "request_state": "completed"}


def _agent_rows() -> list[dict]:
    """One agent episode of two segments: the reward row is the second, a child of the
    first at message 1 and token 2."""
    tree = {"index": 1, "parent": 0, "branch": "spawn", "branch_message": 1, "branch_token": 2,
            "side_call": False, "session_segments": 2, "session_side_calls": 0}
    first = dict(ROW, episode_id="e0", episode_row=1, score=0.0,
                 segment=dict(tree, index=0, parent=None, branch=None, branch_message=0,
                              branch_token=0))
    return [dict(ROW, episode_id="e0", episode_row=0, segment=tree), first]


def test_export_writes_the_sessions_of_a_dump_directory(tmp_path, capfd):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _agent_rows()))
    (dumps / "2.jsonl").write_text(json.dumps(dict(ROW, step=2)) + "\n")
    out = tmp_path / "out" / "sessions.jsonl"
    assert main(["trajectories", "export", str(dumps), "--out", str(out)]) == 0
    assert "wrote 2 sessions (3 segments, 6 policy tokens) from 2 dump files" in capfd.readouterr().out
    agent, engine = read_trajectories(out)
    assert agent["session_id"] == "step1/e0" and agent["reward"] == 1.0
    assert [(s["id"], s["parent"], s["branch"], s["branch_token"]) for s in agent["segments"]] == [
        (0, None, None, 0), (1, 0, "spawn", 2)]
    segment = agent["segments"][1]
    assert segment["token_ids"] == [5, 6, 7, 8, 9] and segment["loss_mask"] == [0, 0, 1, 0, 1]
    assert segment["log_probs"] == [0.0, 0.0, -0.5, 0.0, -0.25]
    assert segment["policy_versions"] == [-1, -1, 0, -1, 0]
    assert agent["metadata"]["session_segments"] == 2
    assert engine["session_id"] == "step2/1-0/0" and len(engine["segments"]) == 1
    assert main(["trajectories", "validate", str(out)]) == 0
    assert "2 sessions, 3 segments, all match the trajectory format" in capfd.readouterr().out


def test_refusals_are_one_line_with_exit_2(tmp_path, capfd):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"format_version": 1, "session_id": "s", "reward": 1,
                               "segments": [], "metadata": {}}) + "\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    old = tmp_path / "old"
    old.mkdir()
    (old / "1.jsonl").write_text(json.dumps({"step": 1, "uid": "u", "score": 0.0}) + "\n")
    out = tmp_path / "out.jsonl"
    for argv, says in [
        (["export", str(tmp_path / "nope"), "--out", str(out)], "does not exist"),
        (["export", str(empty), "--out", str(out)], "holds no trajectory dumps"),
        (["export", str(old), "--out", str(out)], "a dump row without prompt_ids"),
        (["export", str(old)], "needs --out FILE.jsonl"),
        (["validate", str(bad)], "bad.jsonl line 1 does not match the trajectory format: "
                                 "segments: [] should be non-empty"),
    ]:  # fmt: skip
        assert main(["trajectories", *argv]) == 2, argv
        err = capfd.readouterr().err
        assert err.count("\n") == 1 and says in err and "Traceback" not in err, (argv, err)
        assert err.startswith(f"agentrl trajectories {argv[0]}: ")
    assert not out.exists()
