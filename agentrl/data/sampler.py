"""Users' own samplers of the training rows (verl's `data.sampler`), e.g. a curriculum.

    data:
      sampler:
        class_path: pkg://my_pkg.samplers      # or file://path/to/samplers.py, a .py path, a module
        class_name: EasyFirstSampler
      dataloader_num_workers: 0                # required with a sampler (as in verl)

The class is built as `cls(data_source=dataset, data_config=data_config)` and must be a
`torch.utils.data.Sampler` of row indices (verl's `AbstractSampler`, here
`agentrl.data.sampler.AbstractSampler`, is one). The training loader draws each epoch's
indices from it lazily, batch by batch; a sampler that also has
`update(batch: DataProto)` (`AbstractCurriculumSampler`) is called by the trainer after every
step with that step's batch, so it can reorder what comes next. On resume the loader skips
the indices of the batches already trained in the epoch; a sampler with `state_dict()` /
`load_state_dict(state)` is checkpointed with the loader.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sized
from typing import Any

from torch.utils.data import Sampler


class AbstractSampler(Sampler[int]):
    """verl's sampler interface: built from the dataset and the `data` config."""

    @abstractmethod
    def __init__(self, data_source: Sized, data_config: Any) -> None: ...


class AbstractCurriculumSampler(AbstractSampler):
    """A sampler that learns from each training step (`update` gets the step's DataProto)."""

    @abstractmethod
    def update(self, batch: Any) -> None: ...


def sampler_target(class_path: str, class_name: str) -> str:
    """verl's `class_path` forms as a plugin path: `pkg://mod` and `mod` -> `mod.Name`;
    `file://f.py` and `f.py` -> `f.py:Name`."""
    path = str(class_path)
    if path.startswith("pkg://"):
        return f"{path[len('pkg://'):]}.{class_name}"
    path = path.removeprefix("file://")
    return f"{path}:{class_name}" if path.endswith(".py") else f"{path}.{class_name}"


def create_sampler(dataset: Sized, data_config: Any) -> Sampler[int] | None:
    """The sampler `data.sampler` names, or None when `class_path` is null."""
    cfg = data_config.sampler
    if not cfg.class_path:
        return None
    if not cfg.class_name:
        raise ValueError("data.sampler.class_path is set but data.sampler.class_name is null")
    from agentrl.plugins import load_object

    cls = load_object(sampler_target(cfg.class_path, cfg.class_name), expected_base=Sampler)
    return cls(data_source=dataset, data_config=data_config)


__all__ = ["AbstractCurriculumSampler", "AbstractSampler", "create_sampler", "sampler_target"]
