"""A training run's checkpoints as the trainer takes them: where (``trainer.default_local_dir``),
what the driver adds to the worker models' (``data.pt``: the global step, the train loader's
position, the adaptive KL coefficient, the behaviour monitor's and the batch source's
states), saving a step and resuming from ``trainer.resume_mode``'s checkpoint.
agentrl/trainer/checkpointing.py keeps the directory's layout, atomic saves and rotation.

    settings = CheckpointSettings.from_config(config.trainer)
    checkpoints = RunCheckpoints(settings, resume_from, loader, kl_ctrl, monitor, source)
    checkpoints.save(models, checkpoints.driver_state(step))
    step = checkpoints.resume(models, step)   # the step to continue after
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agentrl.trainer import checkpointing as ckpt
from agentrl.trainer.alerts import BehaviourMonitor
from agentrl.trainer.batch_source import BatchSource
from agentrl.trainer.trainer_settings import CheckpointSettings, refuse_raw

logger = logging.getLogger(__name__)


class RunCheckpoints:
    """The checkpoints of one run; ``resume_from`` is ``checkpointing.resume_path``'s
    answer (None: a fresh start), the other arguments the driver's parts that hold state."""

    def __init__(self, settings: CheckpointSettings, resume_from: Path | None,
                 train_dataloader: Any, kl_ctrl: Any, monitor: BehaviourMonitor,
                 source: BatchSource) -> None:  # fmt: skip
        refuse_raw(settings, CheckpointSettings, "RunCheckpoints")
        self.settings = settings
        self.resume_from = resume_from
        self.train_dataloader = train_dataloader
        self.kl_ctrl = kl_ctrl
        self.monitor = monitor
        self.source = source
        self.resumed: dict[str, Any] = {}  # the driver state `resume` loaded (the source's too)

    @property
    def root(self) -> Path:
        """`trainer.default_local_dir` as an absolute path (Ray workers have other cwds)."""
        return Path(self.settings.default_local_dir).resolve()

    def driver_state(self, step: int) -> dict[str, Any]:
        """The driver's share of a checkpoint (`data.pt`) as of `step`."""
        state = {"global_step": step, "dataloader": self.train_dataloader.state_dict()}
        if self.kl_ctrl is not None:
            state["kl_coef"] = float(self.kl_ctrl.value)
        return state | {"alerts": self.monitor.state_dict()} | self.source.state_dict()

    def save(self, models: Any, state: dict[str, Any], final: bool = False) -> Path:
        """Checkpoint `models` and the driver's `state` as its step (checkpointing.save:
        atomic, marked latest, old ones rotated); `final`: the run's last, which holds a
        Hugging Face model too (`trainer.save_hf_model_at_end`)."""
        return ckpt.save(self.root, int(state["global_step"]), models, state, self.settings,
                         final=final)  # fmt: skip

    def resume(self, models: Any, step: int) -> int:
        """Load `resume_from` into `models` and the driver's parts; returns its global step
        (`step` unchanged for a fresh start)."""
        if self.resume_from is None:
            logger.info("training from scratch (resume_mode=%s)", self.settings.resume_mode)
            return step
        state = ckpt.restore(self.resume_from, models)
        self.train_dataloader.load_state_dict(state["dataloader"])
        if self.kl_ctrl is not None and "kl_coef" in state:
            self.kl_ctrl.value = state["kl_coef"]
        self.monitor.load_state_dict(state.get("alerts", {}))
        self.resumed = state  # the batch source's share: BatchSource.running gets it
        step = int(state["global_step"])
        logger.info("resumed from %s at global step %d", self.resume_from, step)
        return step
