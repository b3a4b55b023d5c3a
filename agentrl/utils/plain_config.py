"""Config sections as plain Python: a read-only snapshot for hot paths, a dict, a container.

    cfg = plain_config(cfg.actor_rollout_ref.rollout)
    cfg.multi_turn.max_assistant_turns          # a dict lookup, not OmegaConf's resolution
    plain_dict(cfg.reward_model.reward_kwargs)  # a dict (None -> {}), interpolations resolved
    plain_container(entries)                    # OmegaConf lists and dicts as lists and dicts

OmegaConf's attribute access resolves interpolations and validates on every read (about
10 us); the rollout engine reads its config per request and per turn, which added up to
tens of milliseconds per GRPO step on the CPU quickstart. The snapshot is taken once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf


class PlainConfig(dict):
    """A dict whose keys read as attributes too; nested sections are PlainConfigs."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"config has no key {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("a PlainConfig snapshot is read-only; change the source config")


def _wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return PlainConfig({k: _wrap(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


def plain_container(value: Any) -> Any:
    """An OmegaConf DictConfig or ListConfig as plain dicts and lists (interpolations
    resolved); anything else as it is."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def plain_dict(value: Any, what: str = "a config section") -> dict[str, Any]:
    """A DictConfig (resolved) or mapping as a new plain dict; None as {}. Anything else is a
    TypeError naming ``what`` and the type it got."""
    if value is None:
        return {}
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)  # type: ignore[return-value]
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{what} must be a mapping, got {type(value).__name__}: {value!r}")


def plain_config(config: Any) -> Any:
    """A PlainConfig of a DictConfig (resolved) or a mapping; anything else as it is."""
    if isinstance(config, DictConfig):
        return _wrap(OmegaConf.to_container(config, resolve=True))
    if isinstance(config, dict):
        return _wrap(config)
    return config


__all__ = ["PlainConfig", "plain_config", "plain_container", "plain_dict"]
