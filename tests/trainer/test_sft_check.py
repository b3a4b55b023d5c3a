"""The held-out skill check that ends an SFT stage: turn spans, teacher-forced turn
reproduction (an oracle model, a model wrong in one turn), the stop rule's steps, and
run_sft stopping on the check or hitting its cap with a warning."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

import agentrl.trainer.sft as sft_module
from agentrl.tasks.arithmetic_sft import make_arithmetic_sft_rows
from agentrl.trainer.sft import run_sft
from agentrl.trainer.sft_check import SkillCheck, SkillStop, turn_reproduction, turn_spans


def test_turn_spans_are_the_runs_of_trained_tokens():
    assert turn_spans([0, 1, 1, 0, 0, 1, 0, 1]) == [(1, 3), (5, 6), (7, 8)]
    assert turn_spans([0, 0]) == []
    assert turn_spans([1, 1]) == [(0, 2)]


class OracleLM(torch.nn.Module):
    """Predicts each sequence's true next token, except at the positions in `wrong`
    ((row's first token, position) -> predicted token instead)."""

    def __init__(self, vocab: int, wrong: dict[tuple[int, int], int] | None = None):
        super().__init__()
        self.vocab, self.wrong = vocab, wrong or {}

    def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
        b, t = input_ids.shape
        nxt = torch.cat([input_ids[:, 1:], torch.zeros(b, 1, dtype=torch.long)], dim=1)
        for row in range(b):
            for (first, pos), token in self.wrong.items():
                if int(input_ids[row, 0]) == first:
                    nxt[row, pos] = token
        return SimpleNamespace(logits=torch.nn.functional.one_hot(nxt, self.vocab).float())


def _example(ids: list[int], mask: list[int]) -> SimpleNamespace:
    return SimpleNamespace(input_ids=ids, loss_mask=mask)


def test_turn_reproduction_counts_exact_turns_and_leaves_out_each_turns_first_token():
    # row 1: turns at [2, 5) and [7, 9); row 2: one turn at [1, 4)
    examples = [
        _example([1, 9, 3, 4, 5, 9, 9, 6, 7], [0, 0, 1, 1, 1, 0, 0, 1, 1]),
        _example([2, 3, 4, 5], [0, 1, 1, 1]),
    ]
    assert turn_reproduction(OracleLM(10), examples, pad_token_id=0, batch_size=1) == 1.0
    # wrong on a turn's first token (position 1 predicts token 2 of row 1): still reproduced
    first = OracleLM(10, {(1, 1): 8})
    assert turn_reproduction(first, examples, pad_token_id=0) == 1.0
    # wrong inside row 1's second turn (position 7 predicts its last token): 2 of 3 turns
    inside = OracleLM(10, {(1, 7): 8})
    assert turn_reproduction(inside, examples, pad_token_id=0) == pytest.approx(2 / 3)
    # wrong past the turn (position 8 predicts nothing that is trained): no effect
    assert turn_reproduction(OracleLM(10, {(1, 8): 8}), examples, pad_token_id=0) == 1.0


def test_the_stop_rule_measures_every_n_steps_then_trains_the_extra_steps():
    shares = iter([0.1, 0.5, 0.85, 0.2])
    calls = []

    def measure():
        calls.append(1)
        return next(shares)

    stop = SkillStop(SkillCheck([{}], threshold=0.8, every=10, min_steps=20, extra_steps=15),
                     measure)  # fmt: skip
    stopped = [step for step in range(1, 200) if stop.after_step(step)]
    # measured at 20, 30, 40 (0.85 >= 0.8), then 15 more steps; nothing measured after
    assert stopped[0] == 55 and len(calls) == 3
    assert stop.summary() == {"threshold": 0.8, "reached_at": 40,
                              "curve": [[20.0, 0.1], [30.0, 0.5], [40.0, 0.85]], "last": 0.85}
    now = SkillStop(SkillCheck([{}], threshold=0.5, every=5), lambda: 0.5)
    assert [s for s in range(1, 20) if now.after_step(s)][0] == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rows": []}, "needs held-out rows"),
        ({"threshold": 0.0}, "threshold must be in"),
        ({"every": 0}, "every must be >= 1"),
        ({"extra_steps": -1}, "extra_steps must be >= 0"),
    ],
)
def test_bad_checks_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SkillCheck(**({"rows": [{}]} | kwargs))


def _rows(n: int, seed: int) -> list[dict]:
    return [{"messages": r["messages"][1:]} for r in make_arithmetic_sft_rows(n, "train", seed)]


def test_run_sft_stops_when_the_check_passes(tmp_path, tiny_model_dir, monkeypatch):
    shares = iter([0.2, 0.95])
    monkeypatch.setattr(sft_module, "turn_reproduction", lambda *a: next(shares))
    check = SkillCheck(_rows(4, seed=9), threshold=0.9, every=2, extra_steps=3)
    metrics = run_sft(tiny_model_dir, _rows(8, seed=0), tmp_path / "sft", steps=100,
                      batch_size=4, eval_loss=False, progress=False, until=check)  # fmt: skip
    assert metrics["stop_reason"] == "skill"
    assert metrics["steps"] == 4 + 3  # passed at step 4, then 3 more
    assert metrics["skill_check"]["reached_at"] == 4
    assert metrics["loss_curve"][-1][0] == 7
    assert (tmp_path / "sft" / "config.json").is_file()


def test_run_sft_warns_when_the_cap_comes_first(tmp_path, tiny_model_dir, caplog):
    caplog.set_level(logging.WARNING)
    check = SkillCheck(_rows(4, seed=9), threshold=1.0, every=2)  # a random model: ~0
    metrics = run_sft(tiny_model_dir, _rows(8, seed=0), tmp_path / "sft", steps=4,
                      batch_size=4, eval_loss=False, progress=False, until=check,
                      warmup_steps=0)  # fmt: skip
    assert metrics["stop_reason"] == "cap" and metrics["steps"] == 4
    assert [p[0] for p in metrics["skill_check"]["curve"]] == [2.0, 4.0]
    assert metrics["skill_check"]["reached_at"] is None
    assert "hit its cap of 4 steps before the held-out skill check passed" in caplog.text
    with pytest.raises(ValueError, match="warmup_steps must be >= 0"):
        run_sft(tiny_model_dir, _rows(8, seed=0), tmp_path / "x", steps=1, warmup_steps=-1)
