"""data.sampler: a user's sampler (verl's AbstractSampler / curriculum) drives the train loader."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch.utils.data import Dataset

from agentrl.config import ConfigError, load_config
from agentrl.data import create_train_dataloader
from agentrl.data.sampler import sampler_target

# Written for verl: imports verl's module path, which agentrl stands in for.
CURRICULUM = textwrap.dedent("""
    from verl.experimental.dataset.sampler import AbstractCurriculumSampler

    class ReverseCurriculum(AbstractCurriculumSampler):
        '''Rows in reverse order; after each update, the rest of the epoch in forward order.'''

        def __init__(self, data_source, data_config):
            self.n = len(data_source)
            self.batch_size = data_config.train_batch_size
            self.updates = []
            self.forward = False
            self.epoch_draws = 0

        def __iter__(self):
            self.epoch_draws += 1
            for k in range(self.n):
                yield k if self.forward else self.n - 1 - k

        def __len__(self):
            return self.n

        def update(self, batch):
            self.updates.append(batch)
            self.forward = True
""")


class Rows(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": torch.tensor([i]), "index": i}


def _config(path, *extra):
    return load_config(overrides=[f"data.sampler.class_path={path}",
                                  "data.sampler.class_name=ReverseCurriculum",
                                  "data.train_batch_size=2",
                                  "actor_rollout_ref.actor.ppo_mini_batch_size=2", *extra]).data


def test_a_verl_curriculum_sampler_orders_the_batches_and_sees_updates(tmp_path):
    plugin = tmp_path / "curriculum.py"
    plugin.write_text(CURRICULUM)
    for class_path in (str(plugin), f"file://{plugin}"):
        loader = create_train_dataloader(Rows(), _config(class_path))
        batches = iter(loader)
        assert next(batches)["index"].tolist() == [7, 6]  # the sampler's order, not a shuffle
        loader.sampler.update(batch="step-1")  # what the trainer does after a step
        # lazily drawn: the next batch already follows the update (indices 2, 3 of a forward pass)
        assert next(batches)["index"].tolist() == [2, 3]
        assert loader.sampler.updates == ["step-1"]


def test_resume_skips_what_the_epoch_already_trained(tmp_path):
    plugin = tmp_path / "curriculum.py"
    plugin.write_text(CURRICULUM)
    cfg = _config(plugin)
    first = create_train_dataloader(Rows(), cfg)
    batches = iter(first)
    next(batches), next(batches)
    resumed = create_train_dataloader(Rows(), cfg)
    resumed.load_state_dict(first.state_dict())
    assert [b["index"].tolist() for b in resumed] == [[3, 2], [1, 0]]


def test_sampler_paths_and_config_errors(tmp_path):
    assert sampler_target("pkg://a.b", "S") == "a.b.S"
    assert sampler_target("file://x/s.py", "S") == "x/s.py:S"
    assert sampler_target("x/s.py", "S") == "x/s.py:S"
    assert sampler_target("a.b", "S") == "a.b.S"
    with pytest.raises(ConfigError, match="data.sampler.class_name is null"):
        load_config(overrides=["data.sampler.class_path=x.py"])
    with pytest.raises(ConfigError, match="dataloader_num_workers=0"):
        _config("x.py", "data.dataloader_num_workers=2")
