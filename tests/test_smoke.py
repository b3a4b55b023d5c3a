"""The smoke run (a quick end-to-end check; the README's main job is the quickstart) trains
through the whole stack."""

from __future__ import annotations

import json
import math

import pytest

from agentrl.cli import main
from agentrl.smoke import smoke_compute_score
from agentrl.tools import load_tools
from agentrl.utils.command import DEBUG_ENV


def test_smoke_run_trains_through_the_whole_stack(tmp_path):
    assert main(["smoke", "--out-dir", str(tmp_path), "--steps", "2", "--seed", "1"]) == 0
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert all(math.isfinite(v) for v in m.values() if isinstance(v, float))
        assert m["actor/grad_norm"] > 0
        assert m["actor/pg_clipfrac"] == 0.0  # on-policy: ratio 1, nothing clipped
        assert m["timing/weight_sync_s"] >= 0  # the rollout got the new weights
        assert m["rollout/requests"] == 16  # 4 prompts x n=4, through the multi-turn engine
        assert 1 <= m["response_length/mean"] <= 48
        assert 0.0 <= m["critic/score/mean"] <= 1.1
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (tmp_path / "global_step_2" / "actor").is_dir()
    assert set(load_tools(tmp_path / "calculator_tool.yaml")) == {"calculator"}
    # a second run starts fresh (resume_mode=disable) and overwrites the metrics
    assert main(["smoke", "--out-dir", str(tmp_path), "--steps", "1", "--seed", "1"]) == 0
    again = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in again] == [1]


def test_smoke_score_adds_a_small_plain_text_bonus():
    right = smoke_compute_score("agentrl/arithmetic", "<answer>42</answer>", "42")
    assert right["acc"] == 1.0
    # "answer", "42", "answer": 14 of the 19 characters are letters or digits
    assert right["score"] == pytest.approx(1.0 + 0.1 * 14 / 19)
    wrong = smoke_compute_score("agentrl/arithmetic", "no idea", "42")
    assert wrong == {"score": 0.1, "acc": 0.0}
    assert smoke_compute_score("agentrl/arithmetic", "", "42") == {"score": 0.0, "acc": 0.0}


@pytest.mark.parametrize(("argv", "says"), [
    (["trainer.mode=bogus"], "trainer.mode is 'bogus'; choose one of"),
    (["nosuch.key=1"], "unknown config key nosuch"),
    (["actor_rollout_ref.rollout.agent_function=nowhere/agent.py:run"],
     "actor_rollout_ref.rollout.agent_function: cannot load 'nowhere/agent.py:run'"),
    (["--steps", "0"], "--steps must be >= 1, got 0"),
    (["--size", "huge"], "--size is 'huge'; choose one of nano, tiny"),
])  # fmt: skip
def test_a_bad_input_is_one_message_and_exit_2_before_anything_is_written(
        tmp_path, capsys, monkeypatch, argv, says):
    import agentrl.smoke as smoke

    def started(*args, **kwargs):
        raise AssertionError("the run started before its config was checked")

    monkeypatch.setattr(smoke, "make_tiny_model", started)
    monkeypatch.setattr(smoke, "run_train", started)
    monkeypatch.setenv(DEBUG_ENV, "")  # a leaked --debug would print tracebacks
    out = tmp_path / "smoke"
    assert main(["smoke", "--out-dir", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and err.count("\n") <= 3, err
    assert not out.exists()
    (tmp_path / "file").write_text("")
    assert main(["smoke", "--out-dir", str(tmp_path / "file" / "x")]) == 2
    assert "which is a file" in capsys.readouterr().err
