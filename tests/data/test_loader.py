"""collate_fn and the resumable data loader."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from agentrl.config import load_config
from agentrl.data import (
    ResumableDataLoader,
    collate_fn,
    create_rl_dataset,
    create_train_dataloader,
    create_val_dataloader,
)
from agentrl.protocol import DataProto


class Rows(Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": torch.tensor([i, i]), "index": i,
                "tools_kwargs": {"calc": {"create_kwargs": {"gt": str(i)}}},
                "raw_prompt": [{"role": "user", "content": f"q{i}"}]}


def _indices(batches) -> list[list[int]]:
    return [b["index"].tolist() for b in batches]


def test_collate_stacks_tensors_and_keeps_objects_one_dimensional():
    batch = collate_fn([Rows(3)[i] for i in range(3)])
    assert batch["input_ids"].shape == (3, 2)
    for key in ("index", "tools_kwargs", "raw_prompt"):
        assert isinstance(batch[key], np.ndarray) and batch[key].dtype == object
        assert batch[key].shape == (3,)
    assert batch["raw_prompt"][1] == [{"role": "user", "content": "q1"}]
    data = DataProto.from_single_dict(batch)
    assert len(data) == 3 and data.non_tensor_batch["tools_kwargs"][2]["calc"]["create_kwargs"] == {"gt": "2"}


def test_collate_rejects_empty_and_mismatched_items():
    with pytest.raises(ValueError, match="empty batch"):
        collate_fn([])
    with pytest.raises(ValueError, match="item 1 has keys"):
        collate_fn([{"a": 1}, {"b": 2}])


def test_epoch_orders_are_deterministic_permutations():
    loader = ResumableDataLoader(Rows(10), batch_size=3, shuffle=True, seed=5)
    assert len(loader) == 3
    first = _indices(loader)
    second = _indices(loader)
    assert first != second  # a new permutation each epoch
    again = ResumableDataLoader(Rows(10), batch_size=3, shuffle=True, seed=5)
    assert _indices(again) == first
    assert len(set(sum(first, []))) == 9  # drop_last: 9 distinct rows of 10


def test_resume_mid_epoch_continues_with_the_same_batches():
    reference = ResumableDataLoader(Rows(20), batch_size=4, shuffle=True, seed=1)
    full = _indices(reference) + _indices(reference)  # two epochs
    loader = ResumableDataLoader(Rows(20), batch_size=4, shuffle=True, seed=1)
    seen = []
    for batch in loader:
        seen.append(batch["index"].tolist())
        if len(seen) == 3:
            break
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["batches_consumed"] == 3
    resumed = ResumableDataLoader(Rows(20), batch_size=4, shuffle=True, seed=1)
    resumed.load_state_dict(state)
    rest = _indices(resumed) + _indices(resumed)
    assert seen + rest == full[:3] + full[3:]


def test_resume_after_the_last_batch_of_an_epoch_starts_the_next():
    loader = ResumableDataLoader(Rows(8), batch_size=4, shuffle=True, seed=0)
    epochs = [_indices(loader), _indices(loader)]
    mid = ResumableDataLoader(Rows(8), batch_size=4, shuffle=True, seed=0)
    for i, _ in enumerate(mid):
        if i == 1:
            state = mid.state_dict()  # taken inside the loop after the epoch's last batch
            break
    resumed = ResumableDataLoader(Rows(8), batch_size=4, shuffle=True, seed=0)
    resumed.load_state_dict(state)
    assert _indices(resumed) == epochs[1]


def test_state_from_another_setup_is_refused():
    state = ResumableDataLoader(Rows(8), batch_size=4, seed=0).state_dict()
    for loader, key in [(ResumableDataLoader(Rows(8), batch_size=2, seed=0), "batch_size"),
                        (ResumableDataLoader(Rows(8), batch_size=4, seed=9), "seed"),
                        (ResumableDataLoader(Rows(12), batch_size=4, seed=0), "num_rows")]:
        with pytest.raises(ValueError, match=f"saved {key} is"):
            loader.load_state_dict(state)


def test_too_few_rows_for_one_batch():
    with pytest.raises(ValueError, match="3 rows, fewer than one batch of 4"):
        ResumableDataLoader(Rows(3), batch_size=4)


def test_factories_follow_the_data_config(tmp_path, tiny_tokenizer):
    from agentrl.tasks.arithmetic import write_arithmetic_dataset

    train, test = write_arithmetic_dataset(tmp_path, n_train=8, n_test=3, seed=0)
    cfg = load_config(overrides=["data.train_batch_size=4", "data.max_prompt_length=256",
                                 "actor_rollout_ref.actor.ppo_mini_batch_size=2"]).data
    train_loader = create_train_dataloader(create_rl_dataset(train, cfg, tiny_tokenizer), cfg)
    val_loader = create_val_dataloader(create_rl_dataset(test, cfg, tiny_tokenizer), cfg)
    batches = list(train_loader)
    assert len(batches) == 2 and batches[0]["input_ids"].shape == (4, 256)
    (val_batch,) = list(val_loader)  # val_batch_size null: everything at once, in order
    assert val_batch["input_ids"].shape == (3, 256)
    assert list(val_batch["index"]) == [0, 1, 2]


def test_custom_dataset_class_is_loaded_from_a_file(tmp_path, tiny_tokenizer):
    plugin = tmp_path / "my_dataset.py"
    plugin.write_text(
        "from torch.utils.data import Dataset\n"
        "class MyDataset(Dataset):\n"
        "    def __init__(self, files, tokenizer, config):\n"
        "        self.files = files\n"
        "    def __len__(self):\n        return 1\n"
        "    def __getitem__(self, i):\n        return {'files': self.files}\n")
    cfg = load_config(overrides=[f"data.custom_cls.path={plugin}",
                                 "data.custom_cls.name=MyDataset"]).data
    dataset = create_rl_dataset(["x.parquet"], cfg, tiny_tokenizer)
    assert type(dataset).__name__ == "MyDataset" and dataset[0] == {"files": ["x.parquet"]}
