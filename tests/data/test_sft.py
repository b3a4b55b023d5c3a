"""SFT dataset: assistant-only loss masks, and exactly the rollout engine's token layout."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentrl.config import load_config
from agentrl.data.sft import (
    SFTDataset,
    SFTRowError,
    read_sft_rows,
    sft_collate_fn,
    tokenize_conversation,
)
from agentrl.models.chat import ChatRenderer
from agentrl.protocol import DataProto
from agentrl.rollout import AsyncRolloutEngine
from agentrl.rollout.backends import GenerationOutput
from agentrl.tasks.arithmetic_sft import make_arithmetic_sft_rows
from agentrl.utils.jsonl import write_parquet
from tools.calculator import CalculatorTool


def segments(example, value: int) -> list[list[int]]:
    """The runs of consecutive tokens whose loss mask is `value`."""
    runs, current = [], []
    for token, mask in zip(example.input_ids, example.loss_mask, strict=True):
        if mask == value:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


def test_only_assistant_tokens_have_loss(tiny_tokenizer):
    (row,) = make_arithmetic_sft_rows(1, "train", seed=0)
    renderer = ChatRenderer(tiny_tokenizer)
    example = tokenize_conversation(renderer, row["messages"], row["tools"])
    assert len(example.input_ids) == len(example.loss_mask)
    assert example.input_ids[: example.prompt_length] == renderer.prompt_ids(
        row["messages"][:2], row["tools"]
    )
    assert set(example.loss_mask[: example.prompt_length]) == {0}
    expression = row["expression"]
    model_turns = [renderer.decode(ids) for ids in segments(example, 1)]
    assert model_turns == [
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "'
        + expression
        + '"}}\n</tool_call><|im_end|>',
        f"<answer>{row['ground_truth']}</answer><|im_end|>",
    ]
    (tool_turn,) = [renderer.decode(ids) for ids in segments(example, 0)[1:]]
    output = row["messages"][3]["content"]
    assert tool_turn == (
        f"\n<|im_start|>user\n<tool_response>\n{output}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # the whole example is the template's rendering, minus the newline after the last turn
    full = renderer.render(row["messages"], tools=row["tools"])
    assert renderer.decode(example.input_ids) == full[:-1]


class ReplayBackend:
    """Answers turn k of every conversation with the k-th model segment of its SFT example
    (found by the user question in the prompt), as a model that learned them would."""

    def __init__(self, tokenizer, turns_by_question: dict[str, list[list[int]]]):
        self.tokenizer = tokenizer
        self.turns = turns_by_question

    async def generate(self, input_ids, sampling_params, request_id):
        text = self.tokenizer.decode(input_ids, skip_special_tokens=False)
        question = next(q for q in self.turns if q in text)
        turn = text.count("<|im_start|>assistant") - 1
        ids = self.turns[question][turn]
        return GenerationOutput(ids, self.tokenizer.decode(ids), "stop", [-1.0] * len(ids))

    async def abort(self, request_id):
        return None


@pytest.mark.parametrize("difficulty", ["easy", "hard"])
def test_sft_tokens_equal_the_rollout_engines(tiny_tokenizer, difficulty):
    cfg = load_config(
        overrides=[
            "data.max_prompt_length=1024",
            "data.max_response_length=512",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.retry_backoff=0.001",
        ]
    ).actor_rollout_ref.rollout
    tool = CalculatorTool({"type": "native"})
    schema = tool.get_openai_tool_schema().model_dump(exclude_none=True)
    rows = make_arithmetic_sft_rows(6, "test", seed=2, difficulty=difficulty, tool_schema=schema)
    dataset = SFTDataset(rows, tiny_tokenizer, max_length=2048)
    backend = ReplayBackend(
        tiny_tokenizer,
        {
            row["messages"][1]["content"]: segments(example, 1)
            for row, example in zip(rows, dataset.examples, strict=True)
        },
    )
    engine = AsyncRolloutEngine(cfg, tiny_tokenizer, backend, {"calculator": tool})
    batch = DataProto.from_dict(
        non_tensors={
            "raw_prompt": [row["messages"][:2] for row in rows],
            "tools_kwargs": [{} for _ in rows],
            "index": list(range(len(rows))),
        }
    )
    requests = []
    asyncio.run(engine.agenerate_sequences(batch, on_request_done=requests.append))
    assert len(requests) == len(rows)
    for request in requests:
        example = dataset[request.batch_data_id]
        assert request.input_ids == example.input_ids
        assert request.loss_mask == example.loss_mask
        assert request.prompt_length == example.prompt_length
        assert request.metrics.tokenization == "match"
        tool_message = request.messages[3]  # the calculator's real output, as in the SFT row
        assert (tool_message["role"], tool_message["content"]) == (
            "tool",
            rows[request.batch_data_id]["messages"][3]["content"],
        )


def test_multi_turn_with_text_and_user_turns(tiny_tokenizer):
    call = {
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": "2 * 3"}},
    }
    messages = [
        {"role": "user", "content": "What is 2 * 3?"},
        {"role": "assistant", "content": "Let me compute.", "tool_calls": [call, call]},
        {"role": "tool", "content": "6"},
        {"role": "tool", "content": "6"},
        {"role": "assistant", "content": "It is 6."},
        {"role": "user", "content": "Sure?"},
        {"role": "assistant", "content": "<answer>6</answer>"},
    ]
    renderer = ChatRenderer(tiny_tokenizer)
    example = tokenize_conversation(renderer, messages)
    turns = [renderer.decode(ids) for ids in segments(example, 1)]
    assert turns[1:] == ["It is 6.<|im_end|>", "<answer>6</answer><|im_end|>"]
    assert turns[0].startswith("Let me compute.\n<tool_call>\n")
    assert turns[0].count("<tool_call>") == 2
    assert renderer.decode(example.input_ids) == renderer.render(messages)[:-1]
    between = [renderer.decode(ids) for ids in segments(example, 0)[1:]]
    assert between[1] == "\n<|im_start|>user\nSure?<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        ([{"role": "user", "content": "hi"}], "before its first assistant turn"),
        ([{"role": "assistant", "content": "hi"}], "before its first assistant turn"),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "a"},
                {"role": "assistant", "content": "b"},
            ],
            "two assistant turns in a row",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": "b"},
            ],
            "must end with an assistant turn",
        ),
    ],
)
def test_unusable_conversations_are_named(tiny_tokenizer, messages, error):
    with pytest.raises(SFTRowError, match=error):
        SFTDataset(
            [
                {
                    "messages": [
                        {"role": "user", "content": "ok"},
                        {"role": "assistant", "content": "ok"},
                    ]
                },
                {"messages": messages},
            ],
            tiny_tokenizer,
            max_length=100,
        )
    with pytest.raises(SFTRowError, match="SFT row 1"):
        SFTDataset(
            [
                {
                    "messages": [
                        {"role": "user", "content": "ok"},
                        {"role": "assistant", "content": "ok"},
                    ]
                },
                {"messages": messages},
            ],
            tiny_tokenizer,
            max_length=100,
        )


def test_truncation_modes(tiny_tokenizer):
    rows = make_arithmetic_sft_rows(2, "train", seed=0)
    full = SFTDataset(rows, tiny_tokenizer, max_length=4096)
    n = len(full[0].input_ids)
    with pytest.raises(SFTRowError, match=f"SFT row 0 has {n} tokens, over max_length=100"):
        SFTDataset(rows, tiny_tokenizer, max_length=100)
    right = SFTDataset(rows, tiny_tokenizer, max_length=n - 5, truncation="right")
    assert right[0].input_ids == full[0].input_ids[: n - 5]
    assert right[0].loss_mask == full[0].loss_mask[: n - 5]
    longest = max(len(e.input_ids) for e in full.examples)
    shortest = min(len(e.input_ids) for e in full.examples)
    if longest > shortest:
        assert len(SFTDataset(rows, tiny_tokenizer, max_length=shortest, truncation="drop")) == 1
    with pytest.raises(ValueError, match="truncation 'left'"):
        SFTDataset(rows, tiny_tokenizer, max_length=100, truncation="left")


def test_collate_pads_right(tiny_tokenizer):
    rows = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
        {
            "messages": [
                {"role": "user", "content": "a longer question here"},
                {"role": "assistant", "content": "a longer answer"},
            ]
        },
    ]
    dataset = SFTDataset(rows, tiny_tokenizer, max_length=512)
    short, long = dataset[0], dataset[1]
    batch = sft_collate_fn([short, long], pad_token_id=7)
    width = len(long.input_ids)
    assert {k: tuple(v.shape) for k, v in batch.items()} == {
        k: (2, width) for k in ("input_ids", "attention_mask", "position_ids", "loss_mask")
    }
    n = len(short.input_ids)
    assert batch["input_ids"][0].tolist() == short.input_ids + [7] * (width - n)
    assert batch["attention_mask"][0].tolist() == [1] * n + [0] * (width - n)
    assert batch["loss_mask"][0].tolist() == short.loss_mask + [0] * (width - n)
    assert batch["position_ids"][0, :n].tolist() == list(range(n))
    assert torch.equal(batch["input_ids"][1], torch.tensor(long.input_ids))


def test_read_parquet_rows_with_tools_as_json(tmp_path):
    path = write_parquet(
        [
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "a"},
                ],
                "tools": '[{"type": "function", "function": {"name": "f"}}]',
            }
        ],
        tmp_path / "sft.parquet",
    )
    (row,) = read_sft_rows(path)
    assert row["tools"] == [{"type": "function", "function": {"name": "f"}}]
    assert row["messages"][1] == {"role": "assistant", "content": "a"}
    with pytest.raises(SFTRowError, match="row 0 has no 'messages'"):
        read_sft_rows(write_parquet([{"text": "x"}], tmp_path / "bad.parquet"))
