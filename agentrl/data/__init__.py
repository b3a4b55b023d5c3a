"""Datasets: verl-format parquet -> chat template -> ids, batching, resumable loading."""

from agentrl.data.loader import (
    ResumableDataLoader,
    collate_fn,
    create_rl_dataset,
    create_train_dataloader,
    create_val_dataloader,
)
from agentrl.data.rl_dataset import RLHFDataset, left_pad, truncate_ids
from agentrl.data.rows import RowError, select_tool_schemas

__all__ = [
    "RLHFDataset",
    "ResumableDataLoader",
    "RowError",
    "collate_fn",
    "create_rl_dataset",
    "create_train_dataloader",
    "create_val_dataloader",
    "left_pad",
    "select_tool_schemas",
    "truncate_ids",
]
