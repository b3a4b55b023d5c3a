"""Tracking: console and file backends, and clear errors for unknown or missing backends."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from agentrl.config import load_config
from agentrl.trainer.tracking import Tracking


def test_file_backend_appends_jsonl_under_the_experiment_dir(tmp_path):
    cfg = load_config(overrides=[f"trainer.default_local_dir={tmp_path / 'exp'}"])
    tracking = Tracking("proj", "run", default_backend=["file"], config=cfg)
    tracking.log({"critic/score/mean": 0.5, "bad": float("nan")}, step=1)
    tracking.finish()
    again = Tracking("proj", "run", default_backend="file", config=cfg)  # a resumed run
    again.log({"critic/score/mean": 0.75}, step=2)
    again.finish()
    rows = [json.loads(x) for x in (tmp_path / "exp" / "metrics.jsonl").read_text().splitlines()]
    assert rows == [
        {"step": 1, "critic/score/mean": 0.5, "bad": None},
        {"step": 2, "critic/score/mean": 0.75},
    ]


def test_file_backend_replaces_the_steps_a_run_logs_again(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": i, "x": i}) + "\n" for i in (1, 2, 3))
                    + '{"step": 4, "x"')  # the crash cut the last line short
    resumed = Tracking("p", "e", default_backend="file", log_dir=tmp_path)
    resumed.log({"x": 30}, step=3)  # resumed from the step-2 checkpoint
    resumed.finish()
    assert [json.loads(x) for x in path.read_text().splitlines()] == [
        {"step": 1, "x": 1}, {"step": 2, "x": 2}, {"step": 3, "x": 30}]
    fresh = Tracking("p", "e", default_backend="file", log_dir=tmp_path)
    fresh.log({"x": 10}, step=1)  # a fresh run in the same directory
    fresh.finish()
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"step": 1, "x": 10}]


def test_console_backend_logs_one_line_per_step(caplog, tmp_path):
    tracking = Tracking("p", "e", default_backend=["console", "console"], log_dir=tmp_path)
    assert list(tracking.backends) == ["console"]
    with caplog.at_level(logging.INFO, logger="agentrl.trainer"):
        tracking.log({"b": 2, "a": 0.123456}, step=3)
        tracking.log(
            {"b": 2, "critic/score/mean": 0.5, "val-core/x/acc/mean@1": 0.25, "timing_s/gen": 1.0},
            step=4,
        )
    assert caplog.messages == [
        "step:3 - a:0.1235 - b:2",  # none of the key metrics: everything
        "step:4 - critic/score/mean:0.5 - val-core/x/acc/mean@1:0.25",  # only the key metrics
    ]
    tracking.finish()
    tracking.finish()  # idempotent


def test_unknown_backend_is_an_error_listing_the_valid_ones():
    with pytest.raises(ValueError, match="unknown tracking backend.*'neptune'.*console, file"):
        Tracking("p", "e", default_backend=["console", "neptune"])


@pytest.mark.parametrize("backend", ["wandb", "mlflow", "tensorboard"])
def test_a_backend_without_its_package_names_the_package(backend, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, backend, None)  # makes `import backend` fail
    with pytest.raises(ImportError, match=f"'{backend}' is not installed: pip install {backend}"):
        Tracking("p", "e", default_backend=[backend], log_dir=tmp_path)
