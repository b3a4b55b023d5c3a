"""Stage targets: the SFT skill check before the cap, the teacher no weaker than its student;
what report.json records and when a miss stops the run (the pipeline's stops are tested in
tests/quickstart/test_pipeline.py)."""

from __future__ import annotations

import logging

import pytest

from agentrl.quickstart.targets import (
    TARGET_MISSED_EXIT,
    TargetMissed,
    meet,
    sft_target,
    teacher_target,
)


def _sft(reached_at, curve, steps=3000):
    stop = "skill" if reached_at is not None else "cap"
    return {"steps": steps, "stop_reason": stop, "skill_check": {
        "threshold": 0.8, "reached_at": reached_at, "curve": curve,
        "last": curve[-1][1] if curve else None}}  # fmt: skip


def test_sft_target_is_the_skill_check_passing_before_the_cap():
    passed = sft_target(_sft(500, [[450.0, 0.05], [500.0, 0.83], [550.0, 0.9]], steps=900))
    assert passed.met and passed.value == 0.83 and passed.threshold == 0.8
    assert passed.measured == "held-out turn reproduction 0.830 at step 500"
    capped = sft_target(_sft(None, [[2900.0, 0.74], [3000.0, 0.72]]))
    assert not capped.met and capped.value == 0.72
    assert capped.measured == ("held-out turn reproduction 0.720 (best 0.740) when the cap "
                               "of 3000 steps came")
    assert "--sft-check" in capped.target and "--sft-steps" in capped.target
    never = sft_target(_sft(None, [], steps=2))
    assert not never.met and never.value is None and "never measured" in never.measured
    assert sft_target({"steps": 100, "stop_reason": "steps"}) is None  # --sft-check 0


def test_a_teacher_below_its_student_misses_its_target():
    student = {"accuracy": 0.344, "accuracy_stderr": 0.03}
    weak = teacher_target({"accuracy": 0.09, "accuracy_stderr": 0.018}, student)
    assert not weak.met and (weak.value, weak.threshold) == (0.09, 0.344)
    assert weak.measured == "teacher 0.090 ± 0.018, student 0.344 ± 0.030"
    assert teacher_target({"accuracy": 0.344}, student).met  # as good as the student: goes
    assert teacher_target({"accuracy": 0.9}, student).met


def test_meet_records_every_target_and_stops_on_a_miss_unless_allowed(caplog):
    report: dict = {}
    meet(report, None, allowed=False)  # no target: nothing recorded
    assert "targets" not in report
    meet(report, teacher_target({"accuracy": 0.9}, {"accuracy": 0.3}), allowed=False)
    assert report["targets"]["teacher"]["target_met"] is True
    weak = teacher_target({"accuracy": 0.09}, {"accuracy": 0.344})
    with pytest.raises(TargetMissed) as stop:
        meet(report, weak, allowed=False, next_stage="distillation")
    entry = report["targets"]["teacher"]
    assert (entry["target_met"], entry["stopped_run"], entry["value"]) == (False, True, 0.09)
    message = str(stop.value)
    assert message.startswith("stopped after the teacher stage, which missed its target:")
    assert "Distillation did not run" in message
    assert "--allow-weak-teacher or --allow-missed-targets to go on anyway" in message
    caplog.set_level(logging.WARNING)
    meet(report, weak, allowed=True)
    assert report["targets"]["teacher"]["stopped_run"] is False
    assert "going on as asked" in caplog.text
    capped = sft_target(_sft(None, [[3000.0, 0.72]]))
    with pytest.raises(TargetMissed, match=r"pass --allow-missed-targets to go on anyway"):
        meet(report, capped, allowed=False)
    assert set(report["targets"]) == {"teacher", "sft"}
    assert TARGET_MISSED_EXIT == 3  # not 2: that is a refusal of what was asked
