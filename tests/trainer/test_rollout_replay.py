"""rollout.skip_rollout (verl's RolloutSkip): a step replayed from an earlier run's dump
trains exactly as the original step did, without generating."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentrl.trainer import PPOTrainer


def _train(make_config, dump: Path, out: Path, *extra):
    cfg = make_config(
        "actor_rollout_ref.rollout.skip_rollout=true",
        f"actor_rollout_ref.rollout.skip_dump_dir={dump}",
        "trainer.total_training_steps=1", f"trainer.default_local_dir={out}",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]", *extra,
    )  # fmt: skip
    trainer = PPOTrainer(cfg)
    calls = []
    try:
        trainer.init_workers()
        generate = trainer.actor_rollout_wg.generate_sequences
        trainer.actor_rollout_wg.generate_sequences = lambda b: calls.append(1) or generate(b)
        (metrics,) = trainer.fit()
    finally:
        trainer.close()
    export = out / "global_step_1" / "actor" / "huggingface"
    weights = load_file(next(export.glob("*.safetensors")))
    return metrics, weights, len(calls)


@pytest.mark.slow
def test_a_replayed_step_gives_the_same_update(make_config, tmp_path):
    dump = tmp_path / "dump"
    first, first_weights, generated = _train(make_config, dump, tmp_path / "a")
    assert generated == 1 and (dump / "step_1.pt").is_file()
    replay, replay_weights, generated = _train(make_config, dump, tmp_path / "b")
    assert generated == 0  # no inference at all
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "response_length/mean"):
        assert replay[key] == first[key], key
    for name, tensor in first_weights.items():
        assert torch.equal(tensor, replay_weights[name]), name


@pytest.mark.slow
def test_a_dump_of_other_prompts_is_refused(make_config, tmp_path):
    dump = tmp_path / "dump"
    _train(make_config, dump, tmp_path / "a")
    with pytest.raises(RuntimeError, match="other prompts than step 1"):
        _train(make_config, dump, tmp_path / "b", "data.seed=123")
