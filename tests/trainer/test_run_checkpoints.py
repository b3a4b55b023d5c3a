"""Tests for agentrl/trainer/run_checkpoints.py: the driver's share of a checkpoint is saved
with the models' and restored into the driver's parts (the trainer's resume runs:
tests/trainer/test_ppo_trainer.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

from agentrl.algos import get_kl_controller
from agentrl.trainer.alerts import BehaviourMonitor
from agentrl.trainer.run_checkpoints import RunCheckpoints


class Loader:
    def __init__(self, position: int = 0) -> None:
        self.position = position

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


class Source:
    """A batch source with state of its own (as the off-policy producer's queue)."""

    def __init__(self, queued: int = 0) -> None:
        self.queued = queued

    def state_dict(self) -> dict:
        return {"producer": {"queued": self.queued}}

    def load_state_dict(self, state: dict) -> None:
        self.queued = state["producer"]["queued"]


class Part:
    """A worker group's checkpoint calls: saving writes a file, loading records the path."""

    def __init__(self) -> None:
        self.loaded: list[str] = []

    def save_checkpoint(self, path: str, global_step: int, **kwargs) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "step").write_text(str(global_step))

    def load_checkpoint(self, path: str) -> None:
        self.loaded.append(path)


def _trainer_config(root, mode="auto"):
    return SimpleNamespace(default_local_dir=str(root), resume_mode=mode, save_hf_model_at_end=False,
                           max_actor_ckpt_to_keep=None, max_critic_ckpt_to_keep=None)


def _kl(value: float):
    return get_kl_controller(SimpleNamespace(type="adaptive", kl_coef=value, target_kl=0.1,
                                             horizon=100))


def _monitor() -> BehaviourMonitor:
    return BehaviourMonitor(SimpleNamespace(window=3))


def test_a_saved_step_resumes_every_part_of_the_driver(tmp_path):
    monitor = _monitor()
    monitor.best = {"reward": 0.8}
    kl = _kl(0.05)
    kl.value = 0.0123
    saving = RunCheckpoints(_trainer_config(tmp_path), None, Loader(7), kl, monitor, Source(3))
    models = SimpleNamespace(actor_rollout=Part(), critic=None)
    state = saving.driver_state(4)
    assert state == {"global_step": 4, "dataloader": {"position": 7}, "kl_coef": 0.0123,
                     "alerts": monitor.state_dict(), "producer": {"queued": 3}}
    path = saving.save(models, state)
    assert path == tmp_path.resolve() / "global_step_4"
    assert (path / "actor" / "step").read_text() == "4"

    fresh_monitor = _monitor()
    loader, fresh_kl, source = Loader(), _kl(0.05), Source()
    resuming = RunCheckpoints(_trainer_config(tmp_path), path, loader, fresh_kl, fresh_monitor,
                              source)
    restored = SimpleNamespace(actor_rollout=Part(), critic=None)
    assert resuming.resume(restored, 0) == 4
    assert restored.actor_rollout.loaded == [str(path.resolve() / "actor")]
    assert (loader.position, fresh_kl.value, source.queued) == (7, 0.0123, 3)
    assert fresh_monitor.best == {"reward": 0.8}


def test_a_fresh_start_keeps_the_step_and_says_so(tmp_path, caplog):
    checkpoints = RunCheckpoints(_trainer_config(tmp_path, "disable"), None, Loader(), None,
                                 _monitor(), Source())
    with caplog.at_level(logging.INFO, logger="agentrl.trainer.run_checkpoints"):
        assert checkpoints.resume(SimpleNamespace(actor_rollout=Part(), critic=None), 0) == 0
    assert "training from scratch (resume_mode=disable)" in caplog.text
    assert "kl_coef" not in checkpoints.driver_state(0)  # no adaptive KL controller
