"""A builder of DataProto batches shaped like the rollout's output, with the real tiny tokenizer.

Prompts are left-padded, responses right-padded; a response is a list of segments
``(text, loss_mask)``: model text has mask 1, tool responses (the chat-template delta) 0.
Test files cannot import this module, so trajectories are passed as dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from agentrl.protocol import DataProto


@dataclass
class Traj:
    prompt: str
    segments: list[tuple[str, int]]
    data_source: str
    ground_truth: Any
    extra_info: dict | None = None
    reward_scores: dict = field(default_factory=dict)


@dataclass
class Built:
    data: DataProto
    lengths: list[int]  # attended response tokens per sample
    response_masks: list[list[int]]


def build_rollout_batch(tokenizer, trajs: list[Traj], response_length: int = 64) -> Built:
    pad = tokenizer.pad_token_id
    prompts, responses, masks = [], [], []
    for t in trajs:
        text = f"<|im_start|>user\n{t.prompt}<|im_end|>\n<|im_start|>assistant\n"
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
        ids, mask = [], []
        for seg_text, seg_mask in t.segments:
            seg = tokenizer.encode(seg_text, add_special_tokens=False)
            ids += seg
            mask += [seg_mask] * len(seg)
        assert len(ids) <= response_length, "response longer than the test's budget"
        responses.append(ids)
        masks.append(mask)
    prompt_length = max(len(p) for p in prompts)
    n = len(trajs)
    prompt_ids = torch.full((n, prompt_length), pad, dtype=torch.long)
    response_ids = torch.full((n, response_length), pad, dtype=torch.long)
    attention = torch.zeros(n, prompt_length + response_length, dtype=torch.long)
    response_mask = torch.zeros(n, response_length, dtype=torch.long)
    for i, (p, r, m) in enumerate(zip(prompts, responses, masks, strict=True)):
        prompt_ids[i, prompt_length - len(p) :] = torch.tensor(p)
        attention[i, prompt_length - len(p) : prompt_length + len(r)] = 1
        if r:
            response_ids[i, : len(r)] = torch.tensor(r)
            response_mask[i, : len(r)] = torch.tensor(m)
    non_tensors = {
        "data_source": [t.data_source for t in trajs],
        "reward_model": [{"style": "rule", "ground_truth": t.ground_truth} for t in trajs],
        "extra_info": [t.extra_info for t in trajs],
    }
    if any(t.reward_scores for t in trajs):
        non_tensors["reward_scores"] = [t.reward_scores for t in trajs]
    data = DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
            "attention_mask": attention,
            "response_mask": response_mask,
        },
        non_tensors=non_tensors,
    )
    return Built(data, [len(r) for r in responses], masks)


@pytest.fixture
def rollout_batch(tiny_tokenizer):
    """``rollout_batch([dict(prompt=, segments=, data_source=, ground_truth=, extra_info=,
    reward_scores=), ...], response_length=64) -> Built`` using the tiny tokenizer."""

    def build(trajs: list[dict], response_length: int = 64) -> Built:
        return build_rollout_batch(tiny_tokenizer, [Traj(**t) for t in trajs], response_length)

    return build
