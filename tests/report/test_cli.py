"""`agentrl report RUN_DIR`: writes the page, or exits 2 saying what is missing."""

from __future__ import annotations

import logging

from agentrl.cli import main


def test_report_command_writes_the_page_and_logs_its_path(train_run, caplog):
    with caplog.at_level(logging.INFO):
        assert main(["report", str(train_run), "--max-per-step", "2"]) == 0
    path = train_run.resolve() / "report.html"
    assert path.is_file()
    assert f"report: {path}" in caplog.text


def test_report_command_on_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"agentrl report: {tmp_path.resolve()} is not an agentrl run directory")
    assert "metrics.jsonl" in err and "global_step_*/ checkpoints" in err
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
