"""RolloutConfig: the rollout engine's settings, typed, made once from the validated tree.

    settings = RolloutConfig.from_config(cfg.actor_rollout_ref.rollout)
    settings.multi_turn.max_parallel_calls, settings.sampling.temperature, settings.on_infra_error

The engine (engine.py) and the trajectory collector (collector.py) read these frozen
dataclasses, not the config tree: no lookup per request, no guess at the config's shape.
No field has a default: every value comes from the tree, whose defaults are the YAML's
(agentrl/config/ppo_trainer.yaml), and a key the tree lacks is an error naming it
(`actor_rollout_ref.rollout.multi_turn.format`), as in verl's `omega_conf_to_dataclass`.
Keys the engine does not read (backend, servers, weight sync) are not copied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentrl.rollout.check_offload import check_offload_setting
from agentrl.utils.infra import check_on_infra_error

ROLLOUT_KEY = "actor_rollout_ref.rollout"


class RolloutConfigError(KeyError):
    """A key the rollout engine reads is missing from the rollout config (the message names
    it in full)."""

    def __str__(self) -> str:  # KeyError quotes its message
        return str(self.args[0])


@dataclass(frozen=True)
class SamplingConfig:
    """One sampling setting: the rollout's (`rollout.temperature`, ...) or validation's
    (`rollout.val_kwargs`)."""

    temperature: float
    top_k: int
    top_p: float
    do_sample: bool
    n: int  # trajectories per prompt


@dataclass(frozen=True)
class MultiTurnConfig:
    """`rollout.multi_turn`: the tool-calling state machine (docs/rollout.md)."""

    enable: bool
    max_assistant_turns: int | None
    max_user_turns: int | None
    max_parallel_calls: int
    max_tool_response_length: int
    tool_response_truncate_side: str
    tool_timeout: float
    max_concurrent_tool_calls: int
    max_new_tokens_per_turn: int | None
    retry_backoff: float
    tool_schemas_in_prompt: str
    tokenization_sanity_check_mode: str
    # "auto", True or False (a "true"/"false" string read as the bool; check_offload.py)
    tokenization_sanity_check_offload: str | bool
    format: str  # the tool-call parser


@dataclass(frozen=True)
class RolloutConfig:
    """What the engine and its collector read of `actor_rollout_ref.rollout`."""

    sampling: SamplingConfig  # training batches (temperature, top_k, top_p, do_sample, n)
    val_kwargs: SamplingConfig  # validation batches
    multi_turn: MultiTurnConfig
    prompt_length: int
    response_length: int
    max_model_len: int | None
    ignore_eos: bool
    calculate_log_probs: bool
    max_concurrent_requests: int
    request_timeout: float | None
    max_retries: int
    over_sample_rate: float
    deterministic: bool | None  # null: what the backend asks for (engine.py)
    on_infra_error: str  # mask | zero | raise (agentrl/utils/infra.py)

    @classmethod
    def from_config(cls, rollout: Any) -> RolloutConfig:
        """From the validated `actor_rollout_ref.rollout` section (a DictConfig, resolved
        here, or a mapping); a missing key raises `RolloutConfigError` naming it."""
        rollout = config_section(rollout, ROLLOUT_KEY)
        top = _fields(cls, rollout, ROLLOUT_KEY, nested={"sampling", "val_kwargs", "multi_turn"})
        multi_turn = _build(MultiTurnConfig, _section(rollout, "multi_turn", ROLLOUT_KEY),
                            f"{ROLLOUT_KEY}.multi_turn")  # fmt: skip
        offload = check_offload_setting(multi_turn.tokenization_sanity_check_offload)
        return cls(
            sampling=_build(SamplingConfig, rollout, ROLLOUT_KEY),
            val_kwargs=_build(SamplingConfig, _section(rollout, "val_kwargs", ROLLOUT_KEY),
                              f"{ROLLOUT_KEY}.val_kwargs"),
            multi_turn=dataclasses.replace(multi_turn, tokenization_sanity_check_offload=offload),
            **top | {"on_infra_error": check_on_infra_error(top["on_infra_error"])},
        )  # fmt: skip


def _section(tree: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = required(tree, key, path)
    if not isinstance(value, Mapping):
        raise TypeError(f"{path}.{key} must be a section, got {type(value).__name__}")
    return value


def config_section(tree: Any, path: str) -> Mapping[str, Any]:
    """The validated section at ``path`` as a resolved mapping (a DictConfig is resolved
    here); anything else a TypeError naming ``path``. Every settings module opens with it."""
    if isinstance(tree, DictConfig):
        tree = OmegaConf.to_container(tree, resolve=True)
    if not isinstance(tree, Mapping):
        raise TypeError(f"{path} must be a config section (DictConfig or mapping), "
                        f"got {type(tree).__name__}")
    return tree


def required(tree: Mapping[str, Any], key: str, path: str) -> Any:
    """``tree[key]``; a missing key raises `RolloutConfigError` naming ``path.key`` in full
    (``key`` alone for a top-level section, path ""); the other settings modules read their
    sections with it too."""
    if key not in tree:
        name = f"{path}.{key}" if path else key
        raise RolloutConfigError(f"{name} is missing from the config (the "
                                 "validated tree has every key: load it with load_config)")
    return tree[key]


def _fields(cls: type, tree: Mapping[str, Any], path: str,
            nested: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:  # fmt: skip
    return {f.name: required(tree, f.name, path)
            for f in dataclasses.fields(cls) if f.name not in nested}  # fmt: skip


def _build(cls: type, tree: Mapping[str, Any], path: str) -> Any:
    return cls(**_fields(cls, tree, path))


__all__ = ["MultiTurnConfig", "RolloutConfig", "RolloutConfigError", "SamplingConfig",
           "config_section", "required"]
