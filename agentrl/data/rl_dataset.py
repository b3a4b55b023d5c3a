"""RLHFDataset: verl-format parquet rows -> chat-templated, left-padded prompt tensors.

    from agentrl.data import RLHFDataset, collate_fn
    ds = RLHFDataset(["train.parquet"], tokenizer, cfg.data)
    ds[0]["input_ids"]  # (max_prompt_length,) left-padded

Each item holds `input_ids`, `attention_mask`, `position_ids` (left-padded to
`max_prompt_length`), `raw_prompt_ids` (the unpadded ids), `raw_prompt` (the messages,
when `return_raw_chat`), `index`, `tools_kwargs`, `interaction_kwargs` and every other
column of the row (`data_source`, `reward_model`, `extra_info`, ...) for the reward.

The prompt is rendered with the tokenizer's chat template and, when
`data.tool_config_path` is set, the tool schemas the row's `tools_kwargs` names (all of
them when it names none; see `rows.select_tool_schemas`). Every row is checked at load
time, so a broken row fails before training starts, with its file and index.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import Dataset

from agentrl.data.rows import (
    RowError,
    check_row,
    normalize_interaction_kwargs,
    normalize_messages,
    normalize_tools_kwargs,
    select_tool_schemas,
)

logger = logging.getLogger(__name__)


def truncate_ids(ids: list[int], max_length: int, side: str, where: str) -> list[int]:
    """Cut `ids` to `max_length` keeping the `side` named by `data.truncation`."""
    if len(ids) <= max_length:
        return ids
    if side == "left":  # drop the start, keep the end (the generation prompt)
        return ids[-max_length:]
    if side == "right":
        return ids[:max_length]
    if side == "middle":
        head = max_length // 2
        return ids[:head] + ids[len(ids) - (max_length - head):]
    if side == "error":
        raise RowError(f"{where}: prompt is {len(ids)} tokens, longer than "
                       f"data.max_prompt_length={max_length} (data.truncation=error; set "
                       "filter_overlong_prompts=true or a truncation side)")
    raise ValueError(f"unknown truncation {side!r}; choose error, left, right or middle")


def left_pad(ids: list[int], length: int, pad_id: int) -> tuple[torch.Tensor, ...]:
    """Left-pad to `length`: (input_ids, attention_mask, position_ids), each (length,)."""
    pad = length - len(ids)
    input_ids = torch.tensor([pad_id] * pad + ids, dtype=torch.long)  # (L,)
    attention_mask = torch.tensor([0] * pad + [1] * len(ids), dtype=torch.long)  # (L,)
    position_ids = torch.clamp(torch.cumsum(attention_mask, dim=0) - 1, min=0)  # (L,)
    return input_ids, attention_mask, position_ids


class RLHFDataset(Dataset):
    """Prompts of verl-format parquet files, rendered and tokenized on access."""

    def __init__(self, data_files: str | os.PathLike | Sequence[str | os.PathLike], tokenizer,
                 config: DictConfig, processor=None):
        if processor is not None:
            raise NotImplementedError("multi-modal processors are not supported yet")
        files = [data_files] if isinstance(data_files, (str, os.PathLike)) else list(data_files)
        if not files:
            raise ValueError("RLHFDataset needs at least one parquet file")
        self.data_files = [Path(os.path.expanduser(str(f))) for f in files]
        self.tokenizer = tokenizer
        self.config = config
        self.prompt_key: str = config.prompt_key
        self.max_prompt_length: int = config.max_prompt_length
        self.truncation: str = config.truncation
        self.return_raw_chat: bool = config.return_raw_chat
        self.return_full_prompt: bool = config.return_full_prompt
        self.return_raw_input_ids: bool = config.return_raw_input_ids
        self.chat_template_kwargs = OmegaConf.to_container(config.apply_chat_template_kwargs)
        self.tool_schemas: list[dict] | None = None
        if config.tool_config_path:
            from agentrl.tools import load_tool_schemas

            self.tool_schemas = load_tool_schemas(config.tool_config_path)
        pad_id = tokenizer.pad_token_id
        self.pad_id: int = pad_id if pad_id is not None else tokenizer.eos_token_id
        self.dataframe = self._read_files()
        if config.filter_overlong_prompts:
            self.dataframe = self._filter_overlong(self.dataframe)

    def _read_files(self) -> datasets.Dataset:
        parts = []
        for path in self.data_files:
            if not path.is_file():
                raise FileNotFoundError(f"dataset file not found: {path}")
            part = datasets.load_dataset("parquet", data_files=str(path), split="train")
            if self.prompt_key not in part.column_names:
                raise RowError(f"{path}: no '{self.prompt_key}' column (data.prompt_key); "
                               f"columns: {', '.join(part.column_names)}")
            tool_names = ({s["function"]["name"] for s in self.tool_schemas}
                          if self.tool_schemas is not None else None)
            for i, row in enumerate(part):
                check_row(row, f"{path.name} row {i}", self.prompt_key, tool_names)
            parts.append(part)
        frame = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
        logger.info("loaded %d rows from %s", len(frame), ", ".join(map(str, self.data_files)))
        return frame

    def _filter_overlong(self, frame: datasets.Dataset) -> datasets.Dataset:
        def fits(row: dict) -> bool:
            return len(self._render_ids(row, "filter")[1]) <= self.max_prompt_length

        workers = self.config.filter_overlong_prompts_workers
        kept = frame.filter(fits, num_proc=workers if workers > 1 else None,
                            desc=f"filtering prompts over {self.max_prompt_length} tokens")
        logger.info("filter_overlong_prompts kept %d of %d rows", len(kept), len(frame))
        return kept

    def _render_ids(self, row: dict, where: str) -> tuple[str, list[int]]:
        messages = normalize_messages(row[self.prompt_key], where, self.prompt_key)
        tools = None
        if self.tool_schemas is not None:
            tools_kwargs = normalize_tools_kwargs((row.get("extra_info") or {}).get(
                "tools_kwargs"), where)
            tools = select_tool_schemas(
                self.tool_schemas, tools_kwargs, self.config.tool_schemas_in_prompt
            ) or None
        text = self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                  add_generation_prompt=True,
                                                  **self.chat_template_kwargs)
        return text, self.tokenizer.encode(text, add_special_tokens=False)

    def __len__(self) -> int:
        return len(self.dataframe)

    def __getitem__(self, item: int) -> dict[str, Any]:
        row = self.dataframe[item]
        where = f"row {item}"
        text, ids = self._render_ids(row, where)
        ids = truncate_ids(ids, self.max_prompt_length, self.truncation, where)
        input_ids, attention_mask, position_ids = left_pad(ids, self.max_prompt_length,
                                                           self.pad_id)
        extra_info = row.get("extra_info") or {}
        out: dict[str, Any] = {k: v for k, v in row.items() if k != self.prompt_key}
        out.update(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            raw_prompt_ids=ids,
            index=extra_info.get("index", item),
            tools_kwargs=normalize_tools_kwargs(extra_info.get("tools_kwargs"), where),
            interaction_kwargs=normalize_interaction_kwargs(
                extra_info.get("interaction_kwargs"), where),
        )
        if self.return_raw_chat:
            out["raw_prompt"] = normalize_messages(row[self.prompt_key], where, self.prompt_key)
        if self.return_full_prompt:
            out["full_prompts"] = text
        if self.return_raw_input_ids:
            out["raw_input_ids"] = list(ids)
        return out
