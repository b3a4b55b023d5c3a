"""Checkpoint layout helpers: the latest marker, resume modes, completeness and rotation."""

from __future__ import annotations

import pytest

from agentrl.trainer import checkpointing as ckpt
from agentrl.trainer.trainer_settings import CheckpointSettings


def _step(root, n, parts=("actor",)):
    path = ckpt.step_dir(root, n)
    for part in parts:
        (path / part).mkdir(parents=True)
    ckpt.save_trainer_state(path, {"global_step": n})
    return path


def _trainer(mode, root, path=None):
    return CheckpointSettings(default_local_dir=str(root), resume_mode=mode, resume_from_path=path,
                              save_hf_model_at_end=False, max_actor_ckpt_to_keep=None,
                              max_critic_ckpt_to_keep=None)


def test_latest_marker_and_resume_modes(tmp_path):
    assert ckpt.latest_checkpoint(tmp_path) is None
    assert ckpt.resume_path(_trainer("auto", tmp_path)) is None
    _step(tmp_path, 3)
    ckpt.mark_latest(tmp_path, 3)
    assert (tmp_path / ckpt.LATEST_FILE).read_text() == "3"
    assert ckpt.resume_path(_trainer("auto", tmp_path)) == tmp_path / "global_step_3"
    assert ckpt.resume_path(_trainer("disable", tmp_path)) is None
    explicit = ckpt.resume_path(_trainer("resume_path", tmp_path, str(tmp_path / "global_step_3")))
    assert explicit == tmp_path / "global_step_3"
    assert ckpt.load_trainer_state(explicit) == {"global_step": 3}
    assert ckpt.step_of(explicit) == 3


def test_bad_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="global_step_7 does not exist"):
        ckpt.resume_path(_trainer("resume_path", tmp_path, str(tmp_path / "global_step_7")))
    with pytest.raises(ckpt.CheckpointError, match="name must be global_step_<N>"):
        ckpt.resume_path(_trainer("resume_path", tmp_path, str(tmp_path)))
    (tmp_path / ckpt.LATEST_FILE).write_text("5")
    with pytest.raises(ckpt.CheckpointError, match="names step 5 but .*global_step_5 does not"):
        ckpt.latest_checkpoint(tmp_path)
    (tmp_path / ckpt.LATEST_FILE).write_text("five")
    with pytest.raises(ckpt.CheckpointError, match="should hold a step number"):
        ckpt.latest_checkpoint(tmp_path)
    path = _step(tmp_path, 1, parts=("actor",))
    ckpt.check_complete(path, ("actor",))
    with pytest.raises(ckpt.CheckpointError, match="incomplete: missing critic"):
        ckpt.check_complete(path, ("actor", "critic"))


def test_rotation_keeps_the_newest(tmp_path):
    for n in (1, 2, 10):
        _step(tmp_path, n, parts=("actor", "critic"))
    assert ckpt.rotate(tmp_path, "actor", None) == []
    removed = ckpt.rotate(tmp_path, "actor", 2)  # numeric order: 10 is the newest
    assert removed == [tmp_path / "global_step_1" / "actor"]
    assert (tmp_path / "global_step_1" / "critic").is_dir()
    ckpt.rotate(tmp_path, "critic", 1)
    # step 1 lost both parts: gone entirely; step 2 keeps its actor
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == [
        "global_step_10",
        "global_step_2",
    ]
    assert (tmp_path / "global_step_2" / "actor").is_dir()
    assert not (tmp_path / "global_step_2" / "critic").exists()
