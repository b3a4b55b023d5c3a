"""The trainer: the single-controller fit loop, its metrics, checkpoints and tracking.

    from agentrl.trainer import PPOTrainer, run_train
    history = run_train(load_config("recipe.yaml"))   # one metrics dict per training step

`agentrl train --config recipe.yaml key=value ...` runs the same (agentrl/trainer/main.py).
See docs/trainer.md.
"""

from agentrl.trainer.main import create_trainer, run_train
from agentrl.trainer.ppo_trainer import PPOTrainer
from agentrl.trainer.tracking import Tracking

__all__ = ["PPOTrainer", "Tracking", "create_trainer", "run_train"]
