"""A held-out skill check that ends an SFT stage when the skill is there, not after a step
count that happened to suffice for some seeds.

    check = SkillCheck(held_out_rows, threshold=0.9, every=50, extra_steps=200)
    run_sft(model, train_rows, out, steps=3000, until=check)   # 3000 is the cap

A tiny model learns to copy digits (from the question into a tool call, from the tool's
output into the answer) in a sudden jump whose step moves with the seed and even the thread
count (docs/quickstart.md, "Why SFT ends on a check"). A fixed step count that suffices for some
seeds stops others before the jump, and RL then has no signal. The check measures the skill
directly: teacher-forced on held-out conversations, the share of assistant turns the model
reproduces exactly (every trained token after the turn's first one is the argmax).

A turn's first token is left out: it is the model's decision (call a tool or answer at
once), which an imperfect teacher makes at random on some phrasings and which RL is there to
improve. Held-out rows should be ones whose turns are determined by their context (the
teacher's tool-using traces), or the share cannot reach 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class SkillCheck:
    """When to stop SFT: once `turn_reproduction` on `rows` reaches `threshold` (measured
    every `every` steps from `min_steps` on), train `extra_steps` more, then stop. The
    caller's step count is the cap."""

    rows: Sequence[dict[str, Any]]
    threshold: float = 0.9
    every: int = 50
    min_steps: int = 0
    extra_steps: int = 0
    batch_size: int = 64

    def __post_init__(self) -> None:
        if not self.rows:
            raise ValueError("SkillCheck needs held-out rows to measure on, got none")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"SkillCheck threshold must be in (0, 1], got {self.threshold}")
        for name in ("every", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"SkillCheck {name} must be >= 1, got {getattr(self, name)}")
        for name in ("min_steps", "extra_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"SkillCheck {name} must be >= 0, got {getattr(self, name)}")


def turn_spans(loss_mask: Sequence[int]) -> list[tuple[int, int]]:
    """The `[start, end)` index ranges of the runs of 1s in `loss_mask` (assistant turns)."""
    spans, start = [], None
    for i, bit in enumerate(loss_mask):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(loss_mask)))
    return spans


@torch.no_grad()
def turn_reproduction(
    model: torch.nn.Module, examples: Sequence[Any], pad_token_id: int, batch_size: int = 64
) -> float:
    """Share of the assistant turns of `examples` (`SFTExample`s: `input_ids`, `loss_mask`)
    that `model` reproduces exactly under teacher forcing, each turn's first token left out
    (see the module docstring). Turns of one token count as reproduced."""
    was_training = model.training
    model.eval()
    hit = total = 0
    try:
        for first in range(0, len(examples), batch_size):
            chunk = examples[first : first + batch_size]
            width = max(len(e.input_ids) for e in chunk)
            ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
            for row, e in enumerate(chunk):
                ids[row, : len(e.input_ids)] = torch.tensor(e.input_ids)
            # Right padding: causal attention keeps real tokens blind to it (as in training).
            predicted = model(input_ids=ids).logits.argmax(-1)  # position t predicts t + 1
            for row, e in enumerate(chunk):
                right = predicted[row, :-1] == ids[row, 1:]
                for start, end in turn_spans(e.loss_mask):
                    total += 1
                    # tokens start+1 .. end-1 are predicted at positions start .. end-2
                    hit += bool(right[start : end - 1].all()) if end - start > 1 else 1
    finally:
        model.train(was_training)
    return hit / total if total else 0.0


class SkillStop:
    """The state of one SFT run's check: call `after_step(step)` after every optimizer step;
    it returns True when the run should stop. `curve` holds `[step, share]` points;
    `reached_at` the step the threshold was first met (None until then)."""

    def __init__(self, check: SkillCheck, measure: Callable[[], float]):
        self.check, self.measure = check, measure  # measure() -> share, on the current model
        self.curve: list[list[float]] = []
        self.reached_at: int | None = None

    def after_step(self, step: int) -> bool:
        c = self.check
        if self.reached_at is not None:
            return step >= self.reached_at + c.extra_steps
        if step < c.min_steps or step % c.every:
            return False
        share = float(self.measure())
        self.curve.append([float(step), share])
        if share >= c.threshold:
            self.reached_at = step
            return c.extra_steps == 0
        return False

    def summary(self) -> dict[str, Any]:
        return {
            "threshold": self.check.threshold,
            "reached_at": self.reached_at,
            "curve": self.curve,
            "last": self.curve[-1][1] if self.curve else None,
        }
