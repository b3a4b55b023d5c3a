"""The targets a quickstart stage must meet before the next stage runs, and the stop when
one is missed (issue 59: a distillation teacher whose SFT ran to its cap without the skill
went on to GRPO and then taught its student to be worse, and nothing said so).

    target = sft_target(report["sft"])                       # None without a skill check
    target = teacher_target(report["teacher"], report["eval_sft"])
    meet(report, target, allowed=False)    # records it; TargetMissed when missed

- `sft`: with a skill check (`--sft-check` above 0), the check must pass before the
  `--sft-steps` cap (`skill_check.reached_at` set). A model that never reproduced the
  held-out turns gives RL or distillation nothing to build on.
- `teacher` (`--teacher`): its greedy accuracy on the student's test problems must be no
  lower than the student's after SFT: distilling from a weaker model lowers the student.

`meet` writes every target into `report["targets"][stage]` (`target`, `measured`,
`threshold`, `value`, `target_met`, `stopped_run`) whether it was met or not. A missed target
raises `TargetMissed` unless allowed; `agentrl quickstart` then exits with status
`TARGET_MISSED_EXIT` (3) and the message, after writing the report of the stages that ran.
Status 2 stays the refusal of what was asked (bad settings, before any stage). The flag that
goes on anyway is the target's `flag` (`--allow-weak-teacher` for the teacher,
`--allow-missed-targets` for any target); the run then logs a warning and the report still
says the target was missed.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

logger = logging.getLogger("agentrl.quickstart")

TARGET_MISSED_EXIT = 3  # `agentrl quickstart`'s exit status when a stage missed its target
ALLOW_ANY = "--allow-missed-targets"  # goes on past any missed target
ALLOW_WEAK_TEACHER = "--allow-weak-teacher"  # goes on past the teacher's target only


@dataclasses.dataclass(frozen=True)
class StageTarget:
    """One stage's target and what the stage reached."""

    stage: str  # the stage's name in report.json (`sft`, `teacher`)
    target: str  # what the stage must reach, in words
    measured: str  # what it reached, in words
    threshold: float  # the number it had to reach
    value: float | None  # the number it reached (None: never measured)
    met: bool
    advice: str  # what to change when it is missed (without the flag to go on)
    flag: str  # the flag that goes on past this target (ALLOW_ANY always does too)


class TargetMissed(RuntimeError):
    """A stage missed its target and the run stopped (exit status TARGET_MISSED_EXIT)."""

    def __init__(self, target: StageTarget, next_stage: str):
        self.target = target
        flags = " or ".join(dict.fromkeys((target.flag, ALLOW_ANY)))
        skipped = next_stage[:1].upper() + next_stage[1:]
        super().__init__(
            f"stopped after the {target.stage} stage, which missed its target: {target.target}; "
            f"measured: {target.measured}. {skipped} did not run (report.json has the "
            f"stages that ran). {target.advice}, or pass {flags} to go on anyway."
        )


def sft_target(sft: dict[str, Any]) -> StageTarget | None:
    """The SFT stage's target from run_sft's metrics: its skill check passed before the cap
    (None when the stage ran without a check, a fixed step count)."""
    check = sft.get("skill_check")
    if not check:
        return None
    threshold, reached = float(check["threshold"]), check["reached_at"]
    shares = [share for _, share in check["curve"]]
    if reached is not None:
        value = next(share for step, share in check["curve"] if step == reached)
        measured = f"held-out turn reproduction {value:.3f} at step {reached}"
    else:
        value = check["last"]
        best = f" (best {max(shares):.3f})" if shares and max(shares) != value else ""
        last = "never measured" if value is None else f"{value:.3f}"
        measured = (f"held-out turn reproduction {last}{best} when the cap of "
                    f"{sft['steps']} steps came")  # fmt: skip
    return StageTarget(
        stage="sft",
        target=f"held-out turn reproduction >= {threshold:.2f} (--sft-check) before the "
        f"--sft-steps cap",
        measured=measured,
        threshold=threshold,
        value=None if value is None else float(value),
        met=reached is not None,
        advice="Raise --sft-steps (the cap) or change --sft-lr",
        flag=ALLOW_ANY,
    )


def teacher_target(teacher: dict[str, Any], student: dict[str, Any]) -> StageTarget:
    """The teacher's target: its greedy accuracy on the student's test problems is no lower
    than the student's after SFT (`eval_teacher` against `eval_sft`)."""
    ours, theirs = float(teacher["accuracy"]), float(student["accuracy"])
    return StageTarget(
        stage="teacher",
        target="the teacher's greedy accuracy >= the student's after SFT (same test problems)",
        measured=f"teacher {ours:.3f} ± {teacher.get('accuracy_stderr', 0.0):.3f}, student "
        f"{theirs:.3f} ± {student.get('accuracy_stderr', 0.0):.3f}",
        threshold=theirs,
        value=ours,
        met=ours >= theirs,
        advice="Train a stronger teacher (its own run's report says which stage fell short)",
        flag=ALLOW_WEAK_TEACHER,
    )


def meet(report: dict[str, Any], target: StageTarget | None, allowed: bool,
         next_stage: str = "the next stage") -> None:
    """Record `target` in `report["targets"]`; when it is missed, raise TargetMissed
    naming `next_stage` (what the stop skips), or, if `allowed`, warn and go on."""
    if target is None:
        return
    stops = not target.met and not allowed
    report.setdefault("targets", {})[target.stage] = {
        "target": target.target,
        "measured": target.measured,
        "threshold": target.threshold,
        "value": target.value,
        "target_met": target.met,
        "stopped_run": stops,
    }
    if stops:
        raise TargetMissed(target, next_stage)
    if not target.met:
        logger.warning("the %s stage missed its target (%s; measured: %s); going on as asked",
                       target.stage, target.target, target.measured)  # fmt: skip


__all__ = ["ALLOW_ANY", "ALLOW_WEAK_TEACHER", "TARGET_MISSED_EXIT", "StageTarget",
           "TargetMissed", "meet", "sft_target", "teacher_target"]
