"""SFT dataset: multi-turn chat conversations -> token ids with a loss mask on assistant tokens.

    dataset = SFTDataset(rows, tokenizer, max_length=1024)
    batch = sft_collate_fn([dataset[0], dataset[1]], pad_token_id)

A row is verl's multi-turn SFT format: `{"messages": [...], "tools": [schema, ...]}` (tools
optional), read from jsonl or parquet by `read_sft_rows`. Assistant messages may carry
`tool_calls`; tool results are `{"role": "tool", "content": ...}` messages.

The token layout is the rollout engine's (agentrl/rollout/request.py), segment by segment,
so SFT trains on exactly the ids the engine would hold for the same conversation:

    [prompt: system + user + tool schemas + generation prompt      loss 0]
    [assistant body + <|im_end|> (what the model writes)           loss 1]
    [turn-end rest ("\\n") + tool/user delta + generation prompt   loss 0]
    [assistant body + <|im_end|>                                   loss 1] ...

Each segment is tokenized on its own (as the engine does: model ids, then template deltas
from `ChatRenderer.delta_text`), never the whole conversation at once. The text after the
last assistant's end-of-turn token is not included: generation stops there.

Recorded trajectories (agentrl/trajectories) are tokenized already: `token_example` takes a
segment's ids and loss mask as they are, and `fit_examples` applies the same `max_length`
rule to both kinds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from agentrl.models.chat import ChatRenderer
from agentrl.utils.jsonl import read_jsonl

logger = logging.getLogger(__name__)

TRUNCATIONS = ("error", "right", "drop")


class SFTRowError(ValueError):
    """A conversation the SFT dataset cannot use (the message names the row and why)."""


@dataclass(frozen=True)
class SFTExample:
    """One tokenized conversation: `input_ids` and `loss_mask` are aligned."""

    input_ids: list[int]
    loss_mask: list[int]
    prompt_length: int  # tokens before the first assistant turn


def read_sft_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a `.jsonl` or `.parquet` file with a `messages` column (and `tools`)."""
    path = Path(path).expanduser()
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        rows = [record for _, record in read_jsonl(path)]
    for i, row in enumerate(rows):
        if "messages" not in row:
            raise SFTRowError(f"{path}: row {i} has no 'messages' (keys: {sorted(row)})")
        if isinstance(row.get("tools"), str):  # tools stored as a JSON string column
            row["tools"] = json.loads(row["tools"])
    return rows


def _model_written_end(renderer: ChatRenderer) -> tuple[str, str]:
    """Split the template's end-of-turn text into what the model writes (up to and with its
    EOS token) and the rest the engine adds with the next delta (e.g. the newline)."""
    eos = renderer.tokenizer.eos_token
    turn_end = renderer.turn_end
    at = turn_end.find(eos) if eos else -1
    if at < 0:
        return turn_end, ""
    cut = at + len(eos)
    return turn_end[:cut], turn_end[cut:]


def tokenize_conversation(
    renderer: ChatRenderer, messages: Sequence[dict], tools: Sequence[dict] | None = None
) -> SFTExample:
    """The rollout engine's token layout of a finished conversation (see the module
    docstring). Raises `SFTRowError` when the conversation has no assistant turn, two
    assistant turns in a row, or an assistant message the template does not render as a
    generation-prompt-prefixed turn."""
    messages = list(messages)
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
    if first is None or first == 0:
        raise SFTRowError("a conversation needs a prompt message before its first assistant turn")
    ids = renderer.prompt_ids(messages[:first], tools)
    mask = [0] * len(ids)
    prompt_length = len(ids)
    written_end, rest = _model_written_end(renderer)
    i = first
    while i < len(messages):
        message = messages[i]
        text = renderer.assistant_text(message)
        if not text.startswith(renderer.generation_prompt) or not text.endswith(renderer.turn_end):
            raise SFTRowError(
                f"assistant message {i} does not render as generation prompt + content + "
                f"turn end: {text!r}"
            )
        body = text[len(renderer.generation_prompt) : len(text) - len(renderer.turn_end)]
        model_ids = renderer.encode(body + written_end)
        ids += model_ids
        mask += [1] * len(model_ids)
        j = i + 1
        while j < len(messages) and messages[j].get("role") != "assistant":
            j += 1
        if j == i + 1 and j < len(messages):
            raise SFTRowError(f"messages {i} and {j} are two assistant turns in a row")
        if j < len(messages):  # tool/user turns, then the generation prompt of turn j
            delta = renderer.encode(rest + renderer.delta_text(messages[i + 1 : j]))
            ids += delta
            mask += [0] * len(delta)
        elif j > i + 1:
            raise SFTRowError("a conversation must end with an assistant turn")
        i = j
    return SFTExample(ids, mask, prompt_length)


class SFTDataset(Dataset):
    """Tokenized multi-turn conversations with assistant-only loss masks.

    Args:
        rows: dicts with `messages` and optional `tools` (see `read_sft_rows`).
        tokenizer: the model's tokenizer (its chat template renders the conversations).
        max_length: the longest example in tokens.
        truncation: what to do with a longer one: `error`, `right` (cut the end) or `drop`.
        chat_template_kwargs: `data.apply_chat_template_kwargs`, as in the rollout.
    """

    def __init__(
        self,
        rows: Sequence[dict],
        tokenizer: Any,
        max_length: int,
        truncation: str = "error",
        chat_template_kwargs: dict | None = None,
    ):
        if truncation not in TRUNCATIONS:
            raise ValueError(f"truncation {truncation!r}; choose one of {', '.join(TRUNCATIONS)}")
        self.renderer = ChatRenderer(tokenizer, chat_template_kwargs)
        named = []
        for index, row in enumerate(rows):
            try:
                example = tokenize_conversation(self.renderer, row["messages"], row.get("tools"))
            except SFTRowError as err:
                raise SFTRowError(f"SFT row {index}: {err}") from None
            named.append((f"SFT row {index}", example))
        self.examples = fit_examples(named, max_length, truncation)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> SFTExample:
        return self.examples[index]


def token_example(input_ids: list[int], loss_mask: list[int]) -> SFTExample:
    """An example of ids tokenized already (a recorded trajectory's segment, its loss mask
    aligned): no template is rendered, the ids train as they are."""
    if len(input_ids) != len(loss_mask):
        raise SFTRowError(f"{len(loss_mask)} loss-mask entries for {len(input_ids)} token ids")
    prompt_length = next((i for i, m in enumerate(loss_mask) if m), len(loss_mask))
    return SFTExample(list(input_ids), [int(m) for m in loss_mask], prompt_length)


def fit_examples(named: Sequence[tuple[str, SFTExample]], max_length: int,
                 truncation: str) -> list[SFTExample]:  # fmt: skip
    """The examples within ``max_length`` tokens, a longer one refused (``error``: the
    message names it), cut at its end (``right``) or left out (``drop``)."""
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation {truncation!r}; choose one of {', '.join(TRUNCATIONS)}")
    examples, dropped = [], 0
    for name, example in named:
        if len(example.input_ids) > max_length:
            if truncation == "error":
                raise SFTRowError(
                    f"{name} has {len(example.input_ids)} tokens, over "
                    f"max_length={max_length} (raise it, or set truncation to right/drop)"
                )
            if truncation == "drop":
                dropped += 1
                continue
            example = SFTExample(
                example.input_ids[:max_length],
                example.loss_mask[:max_length],
                min(example.prompt_length, max_length),
            )
        examples.append(example)
    if dropped:
        logger.warning("dropped %d SFT examples longer than %d tokens", dropped, max_length)
    return examples


def sft_collate_fn(examples: Sequence[SFTExample], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-padded `input_ids`, `attention_mask`, `position_ids`, `loss_mask`, each (B, T)."""
    width = max(len(e.input_ids) for e in examples)
    batch = {
        name: torch.zeros(len(examples), width, dtype=torch.long)
        for name in ("input_ids", "attention_mask", "position_ids", "loss_mask")
    }
    batch["input_ids"].fill_(pad_token_id)
    for row, example in enumerate(examples):
        n = len(example.input_ids)
        batch["input_ids"][row, :n] = torch.tensor(example.input_ids)
        batch["attention_mask"][row, :n] = 1
        batch["position_ids"][row, :n] = torch.arange(n)
        batch["loss_mask"][row, :n] = torch.tensor(example.loss_mask)
    return batch
