"""PromptReader: a batch's rows read, checked and rendered once per prompt."""

from __future__ import annotations

import pytest

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.engine_config import RolloutConfig
from agentrl.rollout.prompts import PromptReader
from agentrl.testing.rollout import make_tools, prompts_batch, rollout_config


def _reader(tokenizer, *overrides: str) -> PromptReader:
    settings = RolloutConfig.from_config(rollout_config(*overrides))
    return PromptReader(settings.multi_turn, ChatRenderer(tokenizer, {}), make_tools(), {})


def test_one_prompt_per_row_with_its_own_tools_rendered(tiny_tokenizer):
    reader = _reader(tiny_tokenizer)
    prompts = reader.read(prompts_batch(3, tools_kwargs={"echo": {"create_kwargs": {}}}))
    assert [p.row for p in prompts] == [0, 1, 2]
    assert all(p.tool_names == ["echo"] for p in prompts)
    assert [s["function"]["name"] for s in prompts[0].schemas] == ["echo"]
    renderer = reader.renderer
    assert prompts[1].prompt_ids == renderer.prompt_ids(prompts[1].messages, prompts[1].schemas)
    assert prompts[0].prompt_ids != prompts[1].prompt_ids  # conv-0 vs conv-1


def test_rows_naming_what_is_not_loaded_raise_with_the_row(tiny_tokenizer):
    reader = _reader(tiny_tokenizer)
    with pytest.raises(ValueError, match=r"row 0: tools_kwargs names tools \['nope'\]"):
        reader.read(prompts_batch(1, tools_kwargs={"nope": {}}))
    with pytest.raises(KeyError, match="raw_prompt"):
        batch = prompts_batch(1)
        del batch.non_tensor_batch["raw_prompt"]
        reader.read(batch)
