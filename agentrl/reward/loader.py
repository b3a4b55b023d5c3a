"""Build the reward manager from the config: ``reward_model.*`` and ``custom_reward_function.*``.

    reward_fn = load_reward_manager(config.reward_model, config.custom_reward_function,
                                    tokenizer, reward_fn_key=config.data.reward_fn_key)
    reward_tensor = reward_fn(batch)

Keys read: ``reward_model.reward_manager`` (naive | dapo | batch | judge | a registered
name; ``reward_model.judge.enable`` picks ``judge`` with that subtree, agentrl/reward/judge.py),
``reward_model.reward_kwargs`` (passed to the manager), ``reward_model.tool_reward_weight``,
``reward_model.step_reward_weight``, ``reward_model.sandbox_fusion.{url, max_concurrent,
memory_limit_mb}`` (without a custom function: the sandbox that scores the code data
sources, as in verl), ``custom_reward_function.path`` (a ``.py`` file or a module; null -> the built-in scorers),
``custom_reward_function.name`` and ``custom_reward_function.reward_kwargs`` (bound to the
custom function as keyword arguments, as verl does).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from agentrl.plugins import load_object
from agentrl.protocol import DATA_SOURCE_KEY
from agentrl.reward.base import RewardManager, get_reward_manager_cls
from agentrl.utils.plain_config import plain_dict


def get_custom_reward_fn(custom_reward_function_config: Any) -> Callable[..., Any] | None:
    """The user's ``compute_score`` named by ``path`` and ``name``, or None when path is null.

    ``path`` is a ``.py`` file (``path/to/my_reward.py``) or an importable module
    (``my_pkg.rewards``); ``reward_kwargs`` are bound with ``functools.partial``.
    """
    if custom_reward_function_config is None:
        return None
    path = custom_reward_function_config.path
    if not path:
        return None
    name = custom_reward_function_config.name or "compute_score"
    spec = f"{path}:{name}" if str(path).endswith(".py") else f"{path}.{name}"
    fn = load_object(spec)
    if not callable(fn):
        raise TypeError(f"custom_reward_function {spec!r} is a {type(fn).__name__}, not callable")
    kwargs = plain_dict(custom_reward_function_config.reward_kwargs,
                        "custom_reward_function.reward_kwargs")
    return functools.partial(fn, **kwargs) if kwargs else fn


def _default_score_fn(reward_model_config: Any, manager_cls: type) -> Callable[..., Any] | None:
    """verl's rule: without a custom function, ``reward_model.sandbox_fusion.url`` sends the
    code data sources to that sandbox (None: the built-in scorers' own defaults)."""
    sandbox = reward_model_config.sandbox_fusion
    if not sandbox.url:
        return None
    from agentrl.reward.managers import BatchRewardManager, batched_default_compute_score
    from agentrl.reward.score import default_compute_score

    fn = batched_default_compute_score if issubclass(manager_cls, BatchRewardManager) else (
        default_compute_score)
    return functools.partial(fn, sandbox_fusion_url=str(sandbox.url),
                             memory_limit_mb=int(sandbox.memory_limit_mb),
                             max_concurrent=int(sandbox.max_concurrent))


def load_reward_manager(
    reward_model_config: Any,
    custom_reward_function_config: Any,
    tokenizer: Any,
    *,
    reward_fn_key: str = DATA_SOURCE_KEY,
    num_examine: int = 0,
    **reward_kwargs: Any,
) -> RewardManager:
    """Build the configured reward manager; ``reward_kwargs`` override
    ``reward_model.reward_kwargs``."""
    name = reward_model_config.reward_manager
    judge = plain_dict(reward_model_config.judge, "reward_model.judge")
    if judge.get("enable"):  # the LLM judge scores (agentrl/reward/judge.py)
        name = "judge"
        reward_kwargs = {"judge": judge, **reward_kwargs}
    cls = get_reward_manager_cls(name)
    configured = plain_dict(reward_model_config.reward_kwargs, "reward_model.reward_kwargs")
    kwargs = {**configured, **reward_kwargs}
    arguments = {
        "tokenizer": tokenizer,
        "num_examine": num_examine,
        "compute_score": get_custom_reward_fn(custom_reward_function_config)
        or _default_score_fn(reward_model_config, cls),
        "reward_fn_key": reward_fn_key,
        "tool_reward_weight": reward_model_config.tool_reward_weight,
        "step_reward_weight": reward_model_config.step_reward_weight,
        **kwargs,
    }
    try:
        inspect.signature(cls).bind(**arguments)
    except TypeError as err:
        raise TypeError(
            f"reward_model.reward_kwargs {sorted(kwargs)} do not fit reward manager {name!r} "
            f"({cls.__name__}{inspect.signature(cls)}): {err}"
        ) from None
    return cls(**arguments)
