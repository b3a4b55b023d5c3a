"""Behaviour alerts (agentrl/trainer/alerts.py): each rule fires after `window` steps in a
row, says what it saw, and can stop the run with a checkpoint."""

from __future__ import annotations

import logging

import pytest

from agentrl.config import load_config
from agentrl.trainer import PPOTrainer
from agentrl.trainer import checkpointing as ckpt
from agentrl.trainer.alerts import RULES, BehaviourMonitor
from agentrl.trainer.trainer_settings import AlertSettings


def _monitor(*overrides):
    alerts = load_config(overrides=list(overrides)).trainer.alerts
    return BehaviourMonitor(AlertSettings.from_config(alerts))


def _step(rate=0.9, requests=100, parse=0, tool_calls=100, tool_errors=0, truncated=0,
          length=50.0, entropy=1.0, drift=0):
    return {"rollout/tool_call_rate": rate, "rollout/requests": requests,
            "rollout/parse_errors": parse, "rollout/tool_calls": tool_calls,
            "rollout/tool_errors": tool_errors, "rollout/truncated": truncated,
            "response_length/mean": length, "actor/entropy": entropy,
            "rollout/tokenization/text_drift": drift}


@pytest.mark.parametrize("rule,bad", [
    ("tool_call_collapse", {"rate": 0.3}),       # < 0.5 x the best (0.9)
    ("parse_error_flood", {"parse": 30}),         # 0.30 per request > 0.25
    ("tool_error_flood", {"tool_errors": 60}),    # 0.6 per call > 0.5
    ("truncation", {"truncated": 60}),
    ("length_collapse", {"length": 10.0}),        # < 0.25 x the first (50)
    ("entropy_collapse", {"entropy": 0.001}),
    ("tokenization_drift", {"drift": 10}),
])
def test_each_rule_fires_after_the_window_and_only_then(rule, bad, caplog):
    monitor = _monitor("trainer.alerts.window=2")
    assert monitor.observe(1, _step())[0] == []
    fired, metrics = monitor.observe(2, _step(**bad))
    assert fired == [] and metrics[f"alerts/{rule}"] == 0.0  # one bad step is not enough
    with caplog.at_level(logging.WARNING, logger="agentrl.trainer.alerts"):
        fired, metrics = monitor.observe(3, _step(**bad))
    assert [a.rule for a in fired] == [rule] and metrics[f"alerts/{rule}"] == 1.0
    assert metrics["alerts/active"] == 1.0
    assert f"step 3: behaviour alert {rule}" in caplog.text
    assert monitor.observe(4, _step())[1][f"alerts/{rule}"] == 0.0  # recovered: quiet again


def test_null_thresholds_switch_rules_off_and_state_survives_a_resume():
    monitor = _monitor("trainer.alerts.window=1", "trainer.alerts.entropy_floor=null")
    assert monitor.observe(1, _step(entropy=0.0))[0] == []
    monitor.observe(2, _step(rate=1.0))
    resumed = _monitor("trainer.alerts.window=1")
    resumed.load_state_dict(monitor.state_dict())
    assert [a.rule for a in resumed.observe(3, _step(rate=0.4))[0]] == ["tool_call_collapse"]
    assert {rule.threshold_key for rule in RULES} <= set(
        load_config().trainer.alerts.keys())


@pytest.mark.slow
def test_stop_on_alert_saves_and_stops(make_config):
    # a floor no policy stays above: the first step fires, the run stops at step 1 of 3
    cfg = make_config("trainer.total_training_steps=3", "trainer.alerts.window=1",
                      "trainer.alerts.stop_on_alert=true", "trainer.alerts.entropy_floor=1e9")
    trainer = PPOTrainer(cfg)
    try:
        history = trainer.fit()
    finally:
        trainer.close()
    assert len(history) == 1 and history[0]["alerts/entropy_collapse"] == 1.0
    root = cfg.trainer.default_local_dir
    assert ckpt.latest_checkpoint(root) == ckpt.step_dir(root, 1)
