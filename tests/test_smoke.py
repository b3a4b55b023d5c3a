"""The smoke pipeline (the README's main job) runs end to end and its update helps."""

from __future__ import annotations

import json
import math

import pytest
import torch

from agentrl.cli import main
from agentrl.smoke import _mask_after_eos, smoke_compute_score


def test_smoke_run_improves_the_surrogate_on_every_step(tmp_path):
    assert main(["smoke", "--out-dir", str(tmp_path), "--steps", "2", "--seed", "1"]) == 0
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line) for line in lines]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert all(math.isfinite(v) for v in m.values())
        # One gradient step on the batch lowers the PPO surrogate loss on that batch.
        assert m["actor/pg_loss_after"] < m["actor/pg_loss"]
        assert m["actor/grad_norm"] > 0
        assert 1 <= m["response_length/mean"] <= 24
        assert 0.0 <= m["reward/mean"] <= 1.1
        assert m["actor/pg_clipfrac"] == 0.0  # on-policy: ratio 1, nothing clipped
    assert (tmp_path / "model" / "config.json").is_file()
    assert (tmp_path / "data" / "train.parquet").is_file()


def test_mask_covers_tokens_up_to_and_including_the_first_eos():
    responses = torch.tensor([[5, 6, 2, 7, 2], [5, 6, 7, 8, 9], [2, 0, 0, 0, 0]])
    assert _mask_after_eos(responses, [2, 0]).tolist() == [
        [1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def test_smoke_score_adds_a_small_plain_text_bonus():
    right = smoke_compute_score("agentrl/arithmetic", "<answer>42</answer>", "42")
    assert right["acc"] == 1.0
    # "answer", "42", "answer": 14 of the 19 characters are letters or digits
    assert right["score"] == pytest.approx(1.0 + 0.1 * 14 / 19)
    wrong = smoke_compute_score("agentrl/arithmetic", "no idea", "42")
    assert wrong == {"score": 0.1, "acc": 0.0}
    assert smoke_compute_score("agentrl/arithmetic", "", "42") == {"score": 0.0, "acc": 0.0}
