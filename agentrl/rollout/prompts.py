"""Request building's first half: a rollout batch's rows read, checked and rendered into
prompts, each prompt once for its n samples (the engine's `build_requests` makes the n
requests of each).

    reader = PromptReader(multi_turn, renderer, tools, interactions)
    for prompt in reader.read(batch):      # one Prompt per row, in row order
        ...

A row names the tools it may call (`tools_kwargs`) and its interaction
(`interaction_kwargs`); naming one that is not loaded raises before anything runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.data.rows import select_tool_schemas
from agentrl.interactions.base import BaseInteraction
from agentrl.models.chat import ChatRenderer
from agentrl.protocol import DataProto
from agentrl.rollout.engine_config import MultiTurnConfig
from agentrl.tools import BaseTool

logger = logging.getLogger(__name__)


@dataclass
class Prompt:
    """One row of the batch, rendered: what its n requests start from."""

    row: int  # the row's index in the batch (the requests' batch_data_id)
    messages: list[dict]
    schemas: list[dict]  # the tool schemas the prompt shows
    tool_names: list[str]  # the tools the sample may call
    tools_kwargs: dict
    interaction_kwargs: dict
    prompt_ids: list[int]
    known_pieces: dict[str, tuple[int, ...]]  # the prompt's pieces for the sanity check


class PromptReader:
    """Reads a batch's rows into `Prompt`s against the loaded tools and interactions."""

    def __init__(
        self,
        multi_turn: MultiTurnConfig,
        renderer: ChatRenderer,
        tools: Mapping[str, BaseTool],
        interactions: Mapping[str, BaseInteraction],
    ) -> None:
        self.multi_turn = multi_turn
        self.renderer = renderer
        self.tools = tools
        self.interactions = interactions
        self.tool_schemas = [
            t.get_openai_tool_schema().model_dump(exclude_none=True) for t in tools.values()
        ]
        self._warned_prompt_mismatch = False

    def read(self, batch: DataProto) -> list[Prompt]:
        """One Prompt per row; raises on rows naming unknown tools/interactions."""
        columns = batch.non_tensor_batch
        if "raw_prompt" not in columns:
            raise KeyError(
                "the rollout needs non_tensor_batch['raw_prompt'] (the chat "
                "messages; set data.return_raw_chat=true)"
            )
        mode = self.multi_turn.tool_schemas_in_prompt
        prompts = []
        for i in range(len(batch)):
            tools_kwargs = (
                dict(columns["tools_kwargs"][i] or {}) if "tools_kwargs" in columns else {}
            )
            interaction_kwargs = (
                dict(columns["interaction_kwargs"][i] or {})
                if "interaction_kwargs" in columns
                else {}
            )
            unknown = sorted(set(tools_kwargs) - set(self.tools))
            if unknown and self.multi_turn.enable:
                raise ValueError(
                    f"row {i}: tools_kwargs names tools {unknown} that are not loaded "
                    f"(loaded: {', '.join(self.tools) or 'none'}; see "
                    "multi_turn.tool_config_path)"
                )
            self.interaction_name(i, interaction_kwargs)  # raises on one not loaded
            schemas = select_tool_schemas(self.tool_schemas, tools_kwargs, mode)
            # the sample may call what the prompt shows; with none shown, its own tools
            callable_schemas = (
                select_tool_schemas(self.tool_schemas, tools_kwargs, "own")
                if mode == "none"
                else schemas
            )
            prompts.append(Prompt(
                row=i, messages=[dict(m) for m in columns["raw_prompt"][i]], schemas=schemas,
                tool_names=[s["function"]["name"] for s in callable_schemas],
                tools_kwargs=tools_kwargs, interaction_kwargs=interaction_kwargs,
                prompt_ids=[], known_pieces={},
            ))  # fmt: skip
        # every prompt once for its n samples; their shared pieces encoded once
        texts = [self.renderer.render_prompt(p.messages, True, p.schemas) for p in prompts]
        checking = self.multi_turn.tokenization_sanity_check_mode != "disable"
        encoded = self.renderer.encode_prompts(texts)
        for prompt, (prompt_ids, pieces) in zip(prompts, encoded, strict=True):
            if "raw_prompt_ids" in columns:
                dataset_ids = columns["raw_prompt_ids"][prompt.row]
                self._compare_with_dataset(prompt.row, prompt_ids, dataset_ids)
            prompt.prompt_ids = prompt_ids
            prompt.known_pieces = pieces if checking else {}
        return prompts

    def interaction_name(self, i: int, interaction_kwargs: dict) -> str | None:
        """The interaction row `i` runs (None: none); raises when it names none loaded."""
        if not (interaction_kwargs and self.interactions and self.multi_turn.enable):
            return None
        name = interaction_kwargs.get("name")
        if name is None and len(self.interactions) == 1:
            return next(iter(self.interactions))
        if name not in self.interactions:
            raise ValueError(
                f"row {i}: interaction_kwargs.name is {name!r}; loaded "
                f"interactions: {', '.join(self.interactions)} (see "
                "multi_turn.interaction_config_path)"
            )
        return name

    def _compare_with_dataset(self, i: int, prompt_ids: list[int], dataset_ids: Any) -> None:
        """Warn (once) when the dataset rendered the prompt differently: the trainer then
        sees other prompt tokens than the dataset's (chat_template_kwargs not passed?)."""
        if self._warned_prompt_mismatch or list(dataset_ids) == prompt_ids:
            return
        self._warned_prompt_mismatch = True
        logger.warning(
            "row %d: the rollout renders the prompt as %d tokens, the dataset's raw_prompt_ids "
            "have %d (different); pass data.apply_chat_template_kwargs to the engine as "
            "chat_template_kwargs, and keep prompts within data.max_prompt_length",
            i,
            len(prompt_ids),
            len(dataset_ids),
        )
