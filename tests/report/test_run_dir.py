"""load_run: which directories are runs, where the dumps are found, and what is tolerated
(a truncated last line, missing metrics, no dumps)."""

from __future__ import annotations

import json
import logging

import pytest
import yaml

from agentrl.report.run_dir import LOOKED_FOR, ReportError, load_run, read_log_jsonl


def test_a_directory_that_is_not_a_run_names_what_was_looked_for(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ReportError) as err:
        load_run(tmp_path)
    message = str(err.value)
    assert str(tmp_path.resolve()) in message
    for item in LOOKED_FOR:
        assert item in message
    assert isinstance(err.value, ValueError)
    with pytest.raises(ReportError, match="is not a directory"):
        load_run(tmp_path / "missing")


def test_train_run_reads_metrics_config_dumps_and_checkpoints(train_run):
    run = load_run(train_run)
    assert run.train_dir == train_run.resolve()
    assert [row["step"] for row in run.metrics] == [0, 1, 2, 3]
    assert run.metrics[3]["val-core/agentrl/arithmetic/acc/mean@1"] == 0.5
    # the dumps of config.yaml's trainer.rollout_data_dir, outside the run directory
    assert [p.name for p in run.sources["rollouts"]] == ["1.jsonl", "2.jsonl", "3.jsonl"]
    assert run.sources["rollouts"][0].parent == train_run.parent / "elsewhere" / "dumps"
    assert run.checkpoints == [3]
    assert run.notes == []


def test_dumps_are_sorted_by_step_number_and_found_in_rollouts_without_config(tmp_path, synthetic):
    for step in (10, 2, 1):
        synthetic.write_jsonl(
            tmp_path / "rollouts" / f"{step}.jsonl", [synthetic.dump_row(step, 0, 1)]
        )
    run = load_run(tmp_path)  # a dump directory alone makes a run (stopped before its first log)
    assert [p.name for p in run.sources["rollouts"]] == ["1.jsonl", "2.jsonl", "10.jsonl"]
    assert run.metrics == []
    assert any("no metrics.jsonl" in note for note in run.notes)


def test_a_moved_run_falls_back_to_its_rollouts_dir(tmp_path, synthetic):
    synthetic.write_jsonl(tmp_path / "metrics.jsonl", synthetic.metrics_rows(1))
    synthetic.write_jsonl(tmp_path / "rollouts" / "1.jsonl", [synthetic.dump_row(1, 0, 1)])
    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump({"trainer": {"rollout_data_dir": "/gone/rollouts"}})
    )
    assert load_run(tmp_path).sources["rollouts"] == [tmp_path.resolve() / "rollouts" / "1.jsonl"]


def test_no_dumps_is_a_note_and_a_warning(tmp_path, synthetic, caplog):
    synthetic.write_jsonl(tmp_path / "metrics.jsonl", synthetic.metrics_rows(2))
    with caplog.at_level(logging.WARNING):
        run = load_run(tmp_path)
    expected = f"no rollout dumps found in {tmp_path.resolve() / 'rollouts'}"
    assert any(note.startswith(expected) for note in run.notes)
    assert "set trainer.rollout_data_dir to see trajectories" in run.notes[-1]
    assert expected in caplog.text
    assert len(run.metrics) == 3


def test_a_truncated_last_line_is_skipped_with_a_warning(tmp_path, synthetic, caplog):
    path = synthetic.write_jsonl(tmp_path / "metrics.jsonl", synthetic.metrics_rows(2))
    with path.open("a") as f:
        f.write(json.dumps({"step": 3, "critic/score/mean": 0.9})[:17])  # killed mid-write
    with caplog.at_level(logging.WARNING):
        rows = read_log_jsonl(path)
        run = load_run(tmp_path)
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert [row["step"] for row in run.metrics] == [0, 1, 2]
    assert "skipped the last line" in caplog.text


def test_quickstart_layout_takes_metrics_and_dumps_from_rl(quickstart_dir):
    run = load_run(quickstart_dir)
    assert run.train_dir == quickstart_dir.resolve() / "rl"
    assert [row["step"] for row in run.metrics] == [0, 1, 2]
    assert run.evaluation["eval_rl"]["accuracy"] == 0.625
    assert list(run.sources) == ["rollouts", "eval_sft"]
    assert run.sources["eval_sft"] == [quickstart_dir.resolve() / "eval_sft.jsonl"]


def test_report_json_alone_is_a_run(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps({"timing_s": {"total": 1.0}}))
    run = load_run(tmp_path)
    assert run.evaluation == {"timing_s": {"total": 1.0}}
    assert run.metrics == [] and run.sources == {}
