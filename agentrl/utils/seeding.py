"""One call that seeds the process's global random streams (python, numpy, torch)."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed `random`, `numpy.random` and torch (CPU and every CUDA device). Code that draws
    from the global streams (dropout, a user's reward function or tool) then repeats."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
