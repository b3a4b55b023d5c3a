"""Behaviour alerts: warn (or stop) when an agent's rollouts go wrong while the reward looks
fine. Users of RL libraries report runs that "reach high reward without ever calling a
tool" or whose agents quietly stop calling tools; none of the peers watches for it.

After every step ``BehaviourMonitor.observe(step, metrics)`` checks the rules below against
that step's metrics (``trainer.alerts.*`` thresholds). A rule fires once it has held for
``trainer.alerts.window`` consecutive steps; every firing step logs one warning that names
the rule, the value, the threshold and what to look at, and adds ``alerts/<rule>`` = 1 (0
when quiet) and ``alerts/active`` to the metrics, so ``metrics.jsonl`` and ``agentrl
report`` show them. With ``trainer.alerts.stop_on_alert`` the trainer saves a checkpoint and
stops at the first firing.

| rule | fires when (threshold key) |
|---|---|
| ``tool_call_collapse`` | ``rollout/tool_call_rate`` < ``tool_call_rate_drop`` x its best so far (best >= 0.1) |
| ``parse_error_flood`` | ``rollout/parse_errors`` per request > ``parse_error_rate`` |
| ``tool_error_flood`` | ``rollout/tool_errors`` per tool call > ``tool_error_rate`` |
| ``truncation`` | ``rollout/truncated`` per request > ``truncation_rate`` |
| ``length_collapse`` | ``response_length/mean`` < ``response_length_collapse`` x its first value |
| ``entropy_collapse`` | ``actor/entropy`` < ``entropy_floor`` (steps that compute it) |
| ``tokenization_drift`` | requests whose tokens drift from the template's text, per request > ``tokenization_drift_rate`` |

A threshold of null switches its rule off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.trainer.trainer_settings import AlertSettings, refuse_raw

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alert:
    """One rule firing at one step."""

    rule: str
    step: int
    value: float
    threshold: float
    advice: str

    def message(self) -> str:
        return (f"step {self.step}: behaviour alert {self.rule}: {self.value:.4g} against "
                f"{self.threshold:.4g}; {self.advice}")


def _ratio(metrics: Mapping[str, float], numerator: str, denominator: str) -> float | None:
    if numerator not in metrics or denominator not in metrics:
        return None
    return float(metrics[numerator]) / max(float(metrics[denominator]), 1.0)


def _drifted(metrics: Mapping[str, float]) -> float | None:
    if "rollout/requests" not in metrics:
        return None
    drift = sum(float(metrics.get(f"rollout/tokenization/{k}", 0.0))
                for k in ("text_drift", "strippable_drift"))
    return drift / max(float(metrics["rollout/requests"]), 1.0)


@dataclass(frozen=True)
class Rule:
    name: str
    threshold_key: str
    value: Callable[[Mapping[str, float]], float | None]
    above: bool  # fires when value > limit (else value < limit)
    relative: str | None  # None | "best" | "first": the limit is threshold x that reference
    advice: str


RULES = (
    Rule("tool_call_collapse", "tool_call_rate_drop",
         lambda m: m.get("rollout/tool_call_rate"), above=False, relative="best",
         advice="the agent stopped calling its tools; check that the reward still needs them "
                "(rollout dumps, agentrl report)"),
    Rule("parse_error_flood", "parse_error_rate",
         lambda m: _ratio(m, "rollout/parse_errors", "rollout/requests"), above=True,
         relative=None,
         advice="many tool calls do not parse; check multi_turn.format against the model's "
                "call syntax"),
    Rule("tool_error_flood", "tool_error_rate",
         lambda m: _ratio(m, "rollout/tool_errors", "rollout/tool_calls"), above=True,
         relative=None,
         advice="many tool calls fail; check the tool servers and rollout/tool_errors/* by kind"),
    Rule("truncation", "truncation_rate",
         lambda m: _ratio(m, "rollout/truncated", "rollout/requests"), above=True,
         relative=None,
         advice="most trajectories hit a length or turn limit; raise the budget or check for "
                "loops"),
    Rule("length_collapse", "response_length_collapse",
         lambda m: m.get("response_length/mean"), above=False, relative="first",
         advice="responses got much shorter than at the start; check for a degenerate policy "
                "(empty answers, skipped reasoning)"),
    Rule("entropy_collapse", "entropy_floor",
         lambda m: m.get("actor/entropy"), above=False, relative=None,
         advice="the policy became nearly deterministic; exploration is gone"),
    Rule("tokenization_drift", "tokenization_drift_rate", _drifted, above=True, relative=None,
         advice="trajectories' tokens drift from the chat template's rendering; check "
                "custom_chat_template and multi_turn.tokenization_sanity_check_mode"),
)


class BehaviourMonitor:
    """Watches per-step metrics against ``trainer.alerts`` (see the module docstring)."""

    def __init__(self, settings: AlertSettings) -> None:
        refuse_raw(settings, AlertSettings, "BehaviourMonitor")
        self.settings = settings
        self.window = settings.window
        self.streak: dict[str, int] = {rule.name: 0 for rule in RULES}
        self.best: dict[str, float] = {}
        self.first: dict[str, float] = {}

    def observe(self, step: int, metrics: Mapping[str, float]) -> tuple[list[Alert], dict]:
        """The alerts firing at ``step`` and the ``alerts/*`` metrics to log with it."""
        fired: list[Alert] = []
        out: dict[str, float] = {}
        for rule in RULES:
            threshold = self.settings.threshold(rule.threshold_key)
            value = rule.value(metrics)
            if threshold is None or value is None:
                continue
            value = float(value)
            limit = self._limit(rule, float(threshold), value)
            breached = limit is not None and (value > limit if rule.above else value < limit)
            self.streak[rule.name] = self.streak[rule.name] + 1 if breached else 0
            active = self.streak[rule.name] >= self.window
            out[f"alerts/{rule.name}"] = float(active)
            if active:
                fired.append(Alert(rule.name, step, value, limit, rule.advice))
        out["alerts/active"] = float(len(fired))
        for alert in fired:
            logger.warning(alert.message())
        return fired, out

    def _limit(self, rule: Rule, threshold: float, value: float) -> float | None:
        if rule.relative is None:
            return threshold
        if rule.relative == "first":
            reference = self.first.setdefault(rule.name, value)
            return threshold * reference if reference > 0 else None
        best = max(self.best.get(rule.name, value), value)
        self.best[rule.name] = best
        return threshold * best if best >= 0.1 else None

    def state_dict(self) -> dict[str, Any]:
        return {"streak": dict(self.streak), "best": dict(self.best), "first": dict(self.first)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.streak.update(state.get("streak", {}))
        self.best = dict(state.get("best", {}))
        self.first = dict(state.get("first", {}))


__all__ = ["RULES", "Alert", "BehaviourMonitor", "Rule"]
