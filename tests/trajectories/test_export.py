"""A run's dumps -> the trajectory format -> SFT, round trip: a GRPO step in agent mode whose
agent rewrites its history (two segments per session) is exported with `agentrl trajectories
export`; every line validates against the shipped JSON Schema, each session is the tree the
gateway recorded, every trained policy token is in the file once; the report's viewer draws
the same trees; `agentrl sft --trajectories` trains on exactly the loss-mask-1 tokens: its
initial loss is the masked NLL computed here, and after memorizing those tokens the model
still does not predict the ones that never trained (a mutant training every token does)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

import agentrl.trajectories
from agentrl.cli import main
from agentrl.trainer import run_train
from agentrl.trajectories.export import TrajectoryExportError, dump_files, sessions_from_rows

REWRITING_AGENT = Path(__file__).parent.parent / "fixtures" / "rewriting_agent.py"
SCHEMA = Path(agentrl.trajectories.__file__).parent / "schema" / "trajectory.schema.json"


def _masked_nll(model_dir: Path, segments: list[dict], mask_key: str = "loss_mask") -> float:
    """Token-mean next-token NLL of the tiny model over each segment's tokens whose mask is 1."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for segment in segments:
            ids = torch.tensor([segment["token_ids"]])  # (1, T)
            mask = torch.tensor(segment[mask_key][1:], dtype=torch.bool)  # (T-1,)
            logits = model(input_ids=ids).logits[0, :-1]  # (T-1, V)
            nll = F.cross_entropy(logits, ids[0, 1:], reduction="none")
            total += float(nll[mask].sum())
            count += int(mask.sum())
    return total / count


@pytest.mark.slow
def test_a_forked_agent_run_exports_validates_and_trains_its_policy_tokens_only(
    make_config, tiny_model_dir, tmp_path
):
    dumps = tmp_path / "rollouts"
    history = run_train(make_config(
        f"actor_rollout_ref.rollout.agent_function={REWRITING_AGENT}:run",
        "actor_rollout_ref.rollout.agent_timeout=60",
        "actor_rollout_ref.rollout.multi_turn.enable=false", "data.max_response_length=64",
        "data.shuffle=false", "trainer.total_training_steps=1",
        f"trainer.rollout_data_dir={dumps}",
    ))  # fmt: skip
    metrics = history[0]
    out = tmp_path / "sessions.jsonl"
    assert main(["trajectories", "export", str(tmp_path / "ckpt"), "--out", str(out)]) == 0

    schema = json.loads(SCHEMA.read_text())
    sessions = [json.loads(line) for line in out.read_text().splitlines()]
    for session in sessions:
        jsonschema.validate(session, schema)
    assert len(sessions) == metrics["rollout/requests"] == 4  # 2 prompts x n=2 episodes
    for session in sessions:
        first, last = session["segments"]
        # the tree the gateway recorded: the rewrite drops every message, keeps no message
        # but shares the user turn's opening tokens
        assert (first["id"], first["parent"], last["id"], last["parent"]) == (0, None, 1, 0)
        assert (first["branch"], last["branch"]) == (None, "fork")  # a rewrite, not a subagent
        assert last["branch_message"] == 0 and 0 < last["branch_token"] < last["prompt_length"]
        assert first["token_ids"][: last["branch_token"]] == last["token_ids"][: last["branch_token"]]
        assert session["metadata"]["session_segments"] == 2 and session["reward"] is not None
        roles = [m["role"] for m in first["messages"]]
        assert roles[-3:] == ["assistant", "user", "assistant"]  # two calls, "Go on." between
        for segment in session["segments"]:
            mask, versions = segment["loss_mask"], segment["policy_versions"]
            assert not any(mask[: segment["prompt_length"]])
            assert all(v >= 0 for v, m in zip(versions, mask, strict=True) if m)
            assert all(p == 0.0 for p, m in zip(segment["log_probs"], mask, strict=True) if not m)
        # the earlier segment holds a user turn between its calls: untrained tokens after
        # its first trained one
        response = first["loss_mask"][first["prompt_length"]:]
        assert 0 in response[response.index(1):]
    policy_tokens = sum(sum(s["loss_mask"]) for t in sessions for s in t["segments"])
    assert policy_tokens == metrics["agent/tokens_trained"] == metrics["agent/tokens_recorded"]
    assert main(["trajectories", "validate", str(out)]) == 0
    # the report's viewer draws the same trees from the same dumps
    assert main(["report", str(tmp_path / "ckpt")]) == 0
    page = (tmp_path / "ckpt" / "report.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.S).group(1))
    records = data["sources"]["rollouts"]["records"]
    assert len(records) == 8 and all(
        [(s["index"], s["parent"], s["depth"]) for s in r["tree"]] == [(0, None, 0), (1, 0, 1)]
        for r in records)

    # SFT on the file: its initial loss is the masked NLL over the policy tokens, and after
    # memorizing them the model still does not predict the tokens it never trained on
    # (prompts, the user turn, template text), which the same steps would memorize as well
    # (the system prompt repeats in every segment) were they trained
    sft_dir = tmp_path / "sft"
    assert main(["sft", "--model", str(tiny_model_dir), "--trajectories", str(out),
                 "--out-dir", str(sft_dir), "--epochs", "40", "--batch-size", "8",
                 "--lr", "1e-2"]) == 0
    sft = json.loads((sft_dir / "sft_metrics.json").read_text())
    segments = [s for t in sessions for s in t["segments"]]
    assert sft["examples"] == len(segments) == 8 and sft["assistant_tokens"] == policy_tokens
    assert sft["loss_before"] == pytest.approx(_masked_nll(tiny_model_dir, segments), rel=1e-4)
    for segment in segments:
        segment["untrained"] = [0] + [1 - m for m in segment["loss_mask"][1:]]
    before = _masked_nll(tiny_model_dir, segments, "untrained")
    trained = _masked_nll(sft_dir, segments)
    untrained = _masked_nll(sft_dir, segments, "untrained")
    assert sft["loss_after"] == pytest.approx(trained, rel=1e-4) and trained < 0.5 * sft["loss_before"]
    assert untrained > 0.8 * before

def test_engine_rows_are_sessions_of_one_segment_and_reward_rows_are_counted(tmp_path):
    row = {"step": 2, "uid": "2-0", "score": 0.5, "prompt_ids": [1, 2], "response_ids": [3, 4],
           "loss_mask": [1, 0], "request_state": "completed", "acc": 0.0}
    sessions = sessions_from_rows([("a", row), ("b", dict(row, score=1.0))], "rollouts")
    assert [s["session_id"] for s in sessions] == ["step2/2-0/0", "step2/2-0/1"]
    assert [s["reward"] for s in sessions] == [0.5, 1.0]
    segment = sessions[0]["segments"][0]
    assert segment["token_ids"] == [1, 2, 3, 4] and segment["loss_mask"] == [0, 0, 1, 0]
    assert segment["log_probs"] is None and segment["parent"] is None
    assert sessions[0]["metadata"] == {"uid": "2-0", "request_state": "completed", "acc": 0.0,
                                       "source": "rollouts", "step": 2, "session_segments": 1,
                                       "session_side_calls": 0}
    twice = [("a", dict(row, episode_id="e", episode_row=0)),
             ("b", dict(row, episode_id="e", episode_row=0))]
    with pytest.raises(TrajectoryExportError, match="has 2 reward rows"):
        sessions_from_rows(twice, "rollouts")
    with pytest.raises(TrajectoryExportError, match="a dump row without prompt_ids"):
        sessions_from_rows([("f line 3", {"step": 1, "uid": "u"})], "rollouts")


def test_dump_files_of_a_dump_dir_a_run_dir_and_neither(tmp_path):
    (tmp_path / "d").mkdir()
    for step in (10, 2):
        (tmp_path / "d" / f"{step}.jsonl").write_text("{}\n")
    assert [p.name for p in dump_files(tmp_path / "d")] == ["2.jsonl", "10.jsonl"]
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "rollouts" / "1.jsonl").write_text("{}\n")
    assert [p.name for p in dump_files(run)] == ["1.jsonl"]
    with pytest.raises(TrajectoryExportError, match="holds no validation dumps"):
        dump_files(run, "validation")
    with pytest.raises(TrajectoryExportError, match="does not exist"):
        dump_files(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrajectoryExportError, match="holds no trajectory dumps"):
        dump_files(tmp_path / "empty")
