"""Assembling a rollout from its config: the one place that loads tools and interactions.

Every caller that builds a rollout engine from `actor_rollout_ref.rollout` takes its engine,
tools and interactions here: `agentrl.workers.rollout_assembly.build_rollout` (which picks
the engine kind for the hybrid rollout worker and `agentrl generate`), the engine workers
(`EngineWorker`: `build_engine` over `engine_factories`), the gateway command
(`configured_tools`). The servers a rollout needs are launched by
`agentrl.rollout.backends.factory.server_launcher` (SGLang, or `agentrl serve` for the hf
engine).

    engine = build_engine(rollout, tokenizer, backend, chat_template_kwargs=...)
    tools = configured_tools(rollout.multi_turn)                 # {name: BaseTool}, wrapped
    interactions = configured_interactions(rollout.multi_turn)   # {name: BaseInteraction}
    make_backend, make_tools, make_interactions = engine_factories(rollout_dict, model_path)

`rollout.engine_class` names a user's engine by path (`pkg.module.Class` or
`file.py:Class`, as slime's custom rollout functions): a subclass of `AsyncRolloutEngine`
built with the same arguments, e.g. one that overrides `run_request` (docs/rollout.md).

`multi_turn` is the `rollout.multi_turn` subtree as a DictConfig or a plain dict.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any


def configured_tools(multi_turn: Mapping[str, Any]) -> dict[str, Any]:
    """The tools of `multi_turn.tool_config_path`, wrapped for `tool_record_mode` (record
    or replay to `tool_record_path`); no path, no tools."""
    if not multi_turn["tool_config_path"]:
        return {}
    from agentrl.tools import load_tools, wrap_tools

    tools = load_tools(multi_turn["tool_config_path"])
    return wrap_tools(tools, multi_turn["tool_record_mode"], multi_turn["tool_record_path"])


def configured_interactions(multi_turn: Mapping[str, Any]) -> dict[str, Any]:
    """The interactions of `multi_turn.interaction_config_path`; no path, none."""
    if not multi_turn["interaction_config_path"]:
        return {}
    from agentrl.interactions.loader import load_interactions

    return load_interactions(multi_turn["interaction_config_path"])


def build_engine(
    rollout: Any,
    tokenizer: Any,
    backend: Any,
    *,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    tools: Mapping[str, Any] | None = None,
    interactions: Mapping[str, Any] | None = None,
) -> Any:
    """The in-process rollout engine of `rollout` (the `actor_rollout_ref.rollout` subtree):
    `AsyncRolloutEngine`, or the subclass `rollout.engine_class` names, with the configured
    tools and interactions (`tools` / `interactions`, when given, replace them: an engine
    worker's own instances)."""
    from agentrl.rollout.engine import AsyncRolloutEngine

    engine_class = AsyncRolloutEngine
    if rollout.get("engine_class"):
        from agentrl.plugins import PluginLoadError, load_object

        try:
            engine_class = load_object(str(rollout["engine_class"]), AsyncRolloutEngine)
        except PluginLoadError as err:
            raise ValueError(f"actor_rollout_ref.rollout.engine_class: {err}") from err
    return engine_class(
        rollout,
        tokenizer,
        backend,
        tools=configured_tools(rollout["multi_turn"]) if tools is None else tools,
        interactions=(configured_interactions(rollout["multi_turn"])
                      if interactions is None else interactions),
        chat_template_kwargs=chat_template_kwargs,
    )


def engine_factories(
    rollout: dict[str, Any], model_path: str | None
) -> tuple[functools.partial, functools.partial, functools.partial]:
    """Picklable `(make_backend(tokenizer), make_tools(), make_interactions())` of a plain
    `rollout` config dict: what an engine built in another process needs (the engine
    workers, `agentrl.rollout.sharded.EngineWorker`)."""
    from agentrl.rollout.backends.factory import create_backend

    multi_turn = dict(rollout["multi_turn"])
    return (
        functools.partial(create_backend, rollout, model_path),
        functools.partial(configured_tools, multi_turn),
        functools.partial(configured_interactions, multi_turn),
    )
