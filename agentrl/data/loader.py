"""Batching for RLHFDataset: `collate_fn`, a resumable data loader, and the factories.

    loader = ResumableDataLoader(dataset, batch_size=8, shuffle=True, seed=1)
    for batch in loader:               # one epoch; batch is a dict (see collate_fn)
        data = DataProto.from_single_dict(batch)
    state = loader.state_dict()        # {"epoch", "batches_consumed", ...} -> checkpoint
    loader.load_state_dict(state)      # continues after the last batch handed out

The loader counts the batches it has handed to the caller (not the ones its workers
prefetched), so a state taken after step k resumes at batch k + 1 with the same order:
the permutation of epoch e is a pure function of (seed, e). With a user's sampler
(`data.sampler`, agentrl/data/sampler.py) the indices come from it instead, drawn lazily.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader, Dataset, Sampler

from agentrl.protocol import to_object_array

logger = logging.getLogger(__name__)


def collate_fn(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Stack tensors into (B, ...) tensors; everything else into 1-D numpy object arrays."""
    if not items:
        raise ValueError("collate_fn got an empty batch")
    keys = list(items[0])
    for i, item in enumerate(items[1:], 1):
        if list(item) != keys:
            raise ValueError(f"collate_fn: item {i} has keys {sorted(item)}, item 0 has "
                             f"{sorted(keys)}")
    batch: dict[str, Any] = {}
    for key in keys:
        values = [item[key] for item in items]
        if isinstance(values[0], torch.Tensor):
            batch[key] = torch.stack(values)
        else:
            batch[key] = to_object_array(_as_object_list(values), key)
    return batch


def _as_object_list(values: list[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array


class _EpochSampler(Sampler[int]):
    """The indices of one epoch, from position `start` on."""

    def __init__(self, order: list[int], start: int):
        self.order, self.start = order, start

    def __iter__(self) -> Iterator[int]:
        return iter(self.order[self.start:])

    def __len__(self) -> int:
        return len(self.order) - self.start


class _SkippingSampler(Sampler[int]):
    """A user's sampler, its first `start` indices skipped (resuming mid-epoch)."""

    def __init__(self, sampler: Sampler[int], start: int):
        self.sampler, self.start = sampler, start

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(iter(self.sampler), self.start, None)

    def __len__(self) -> int:
        return max(len(self.sampler) - self.start, 0)


class ResumableDataLoader:
    """A DataLoader over epochs whose position survives a checkpoint; `sampler` (optional,
    a user's) replaces the seeded shuffle."""

    def __init__(self, dataset: Dataset, batch_size: int, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = True, num_workers: int = 0, collate=collate_fn,
                 sampler: Sampler[int] | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if drop_last and len(dataset) < batch_size:
            raise ValueError(f"the dataset has {len(dataset)} rows, fewer than one batch of "
                             f"{batch_size} (data.train_batch_size); add rows or lower it")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.num_workers = num_workers
        self.collate = collate
        self.sampler = sampler
        self.epoch = 0
        self.batches_consumed = 0  # within self.epoch

    def __len__(self) -> int:
        """Batches per epoch."""
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def epoch_order(self, epoch: int) -> list[int]:
        """The row order of `epoch` (a pure function of seed and epoch)."""
        n = len(self.dataset)
        if not self.shuffle:
            return list(range(n))
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(n, generator=generator).tolist()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Yield the rest of the current epoch, then move to the next epoch."""
        if self.batches_consumed >= len(self):  # a state saved after the epoch's last batch
            self.epoch, self.batches_consumed = self.epoch + 1, 0
        start = self.batches_consumed * self.batch_size
        if self.sampler is not None:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(self.epoch)
            sampler: Sampler[int] = _SkippingSampler(self.sampler, start)
        else:
            sampler = _EpochSampler(self.epoch_order(self.epoch), start)
        loader = DataLoader(self.dataset, batch_size=self.batch_size, sampler=sampler,
                            drop_last=self.drop_last, num_workers=self.num_workers,
                            collate_fn=self.collate)
        for batch in loader:
            self.batches_consumed += 1
            yield batch
        self.epoch, self.batches_consumed = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        state = {"epoch": self.epoch, "batches_consumed": self.batches_consumed,
                 "seed": self.seed, "shuffle": self.shuffle, "batch_size": self.batch_size,
                 "num_rows": len(self.dataset)}
        if self.sampler is not None and hasattr(self.sampler, "state_dict"):
            state["sampler"] = self.sampler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("seed", "shuffle", "batch_size", "num_rows"):
            current = len(self.dataset) if key == "num_rows" else getattr(self, key)
            if state[key] != current:
                raise ValueError(f"cannot resume the data loader: its saved {key} is "
                                 f"{state[key]!r} but the current one is {current!r}")
        self.epoch = int(state["epoch"])
        self.batches_consumed = int(state["batches_consumed"])
        if "sampler" in state and self.sampler is not None:
            self.sampler.load_state_dict(state["sampler"])


def create_rl_dataset(data_files, data_config: DictConfig, tokenizer) -> Dataset:
    """RLHFDataset, or the class named by data.custom_cls.path / .name."""
    from agentrl.data.rl_dataset import RLHFDataset

    dataset_cls = RLHFDataset
    if data_config.custom_cls.path:
        from agentrl.plugins import load_object

        path, name = str(data_config.custom_cls.path), data_config.custom_cls.name
        if not name:
            raise ValueError("data.custom_cls.path is set but data.custom_cls.name is null")
        target = f"{path}:{name}" if path.endswith(".py") else f"{path}.{name}"
        dataset_cls = load_object(target, expected_base=Dataset)
    return dataset_cls(data_files, tokenizer, data_config)


def create_train_dataloader(dataset: Dataset, data_config: DictConfig) -> ResumableDataLoader:
    """The training loader: data.train_batch_size prompts per batch, shuffled per epoch (or
    in the order of the sampler `data.sampler` names)."""
    from agentrl.data.sampler import create_sampler

    return ResumableDataLoader(dataset, batch_size=data_config.train_batch_size,
                               shuffle=data_config.shuffle, seed=data_config.seed,
                               drop_last=True, num_workers=data_config.dataloader_num_workers,
                               sampler=create_sampler(dataset, data_config))


def create_val_dataloader(dataset: Dataset, data_config: DictConfig) -> ResumableDataLoader:
    """The validation loader: data.val_batch_size prompts per batch (null: all at once)."""
    batch_size = data_config.val_batch_size or len(dataset)
    return ResumableDataLoader(dataset, batch_size=batch_size,
                               shuffle=data_config.validation_shuffle, seed=data_config.seed,
                               drop_last=False, num_workers=data_config.dataloader_num_workers)
