"""Load the configuration tree: defaults <- user YAML <- command-line overrides.

    from agentrl.config import load_config
    cfg = load_config("recipes/quickstart/config.yaml", ["actor_rollout_ref.rollout.n=8"])
    cfg = load_config(config_dir="my_verl_configs", config_name="gsm8k_multiturn_grpo",
                      overrides=["data.train_batch_size=8", "~trainer.logger"])

The user's files are composed with Hydra (agentrl/config/compose.py), as verl's
`main_ppo` does: a YAML may have a `defaults:` list (`ppo_trainer` is agentrl's defaults) and
`hydra.searchpath`; overrides take Hydra's `key=value`, `+key=value`, `++key=value` and
`~key`. The composed tree is merged over agentrl/config/ppo_trainer.yaml, verl keys that have
no meaning here are dropped with one warning (agentrl/config/verl_keys.py), verl's value
spellings are normalised (`bfloat16` -> `bf16`), and the result is validated.

The result is an OmegaConf `DictConfig`, resolved (no interpolations left), read-only and
in struct mode: every key exists with the type of its default, so code reads
`cfg.data.max_prompt_length` directly, never `cfg.get(...)`. Every problem found (an
unknown key, a value of the wrong type, batch sizes that disagree) is collected and
raised together as one `ConfigError` that names the keys.
"""

from __future__ import annotations

import difflib
import logging
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from agentrl.config.compose import ComposeError, Override, compose_user_config
from agentrl.config.validate import MIXED_TYPES, NULLABLE_TYPES, check_consistency
from agentrl.config.verl_keys import (
    DEPRECATED_KEYS,
    alias_of,
    is_inert,
    normalise_values,
    parent_of,
    pop_inert_keys,
    rename_keys,
)

logger = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = Path(__file__).with_name("ppo_trainer.yaml")


class ConfigError(ValueError):
    """A configuration problem; the message names every offending key."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("invalid configuration:\n  - " + "\n  - ".join(self.problems))


def load_config(
    config_path: str | Path | None = None,
    overrides: Iterable[str] = (),
    *,
    config_dir: str | Path | None = None,
    config_name: str | None = None,
) -> DictConfig:
    """Return the validated config: defaults, then the user's YAML, then `overrides`.

    The YAML is `config_path` (a file), or `config_name` in `config_dir` (verl's
    `--config-path` / `--config-name`; the directory defaults to agentrl's own, so
    `config_name="ppo_trainer"` alone is the defaults). See the module docstring.
    """
    defaults = OmegaConf.load(DEFAULT_CONFIG_PATH)
    try:
        composed, parsed = compose_user_config(
            config_file=config_path,
            config_dir=config_dir,
            config_name=config_name,
            overrides=list(overrides),
        )
    except ComposeError as exc:
        raise ConfigError([str(exc)]) from exc

    for old, new in rename_keys(composed):
        if old in DEPRECATED_KEYS:
            message = f"config key {old} is deprecated: it is {new} now (the old name works for now)"
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            logger.warning("%s", message)
        else:
            logger.info("verl key %s is agentrl's %s", old, new)
    inert = pop_inert_keys(composed)
    if inert:
        logger.warning(
            "ignoring verl keys that have no effect in agentrl: %s",
            "; ".join(f"{key} ({why})" for key, why in inert),
        )
    source = _source_name(config_path, config_dir, config_name)
    problems = _unknown_problems(composed, defaults, parsed, source)
    if problems:
        raise ConfigError(problems)

    try:
        merged = OmegaConf.merge(defaults, composed)
        problems.extend(_apply_deletions(merged, defaults, parsed))
        OmegaConf.resolve(merged)
    except OmegaConfBaseException as exc:  # a bad interpolation, mostly
        raise ConfigError([f"cannot merge or resolve the configuration: {exc}"]) from exc
    if problems:
        raise ConfigError(problems)
    normalise_values(merged)
    _mode_defaults(merged)

    resolved_defaults = OmegaConf.to_container(defaults, resolve=True)
    problems.extend(_type_problems(OmegaConf.to_container(merged), resolved_defaults, ""))
    if not problems:
        problems.extend(check_consistency(merged))
    if problems:
        raise ConfigError(problems)
    OmegaConf.set_struct(merged, True)
    OmegaConf.set_readonly(merged, True)
    return merged


def _mode_defaults(cfg: DictConfig) -> None:
    """The off-policy modes' correction (docs/off_policy.md): with ``off_policy.rollout_correction``
    and no ``policy_loss.rollout_is`` chosen, truncated importance weights per token."""
    loss = cfg.actor_rollout_ref.actor.policy_loss
    if cfg.trainer.mode != "sync" and cfg.off_policy.rollout_correction and loss.rollout_is is None:
        loss.rollout_is = "token"
        logger.info("trainer.mode=%s with off_policy.rollout_correction: actor_rollout_ref.actor."
                    "policy_loss.rollout_is set to 'token' (truncated per-token importance "
                    "weights; choose another rollout_is to override)", cfg.trainer.mode)


def chat_template_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """`data.apply_chat_template_kwargs` as the plain dict the chat renderer, the rollout
    and the gateway take (the one conversion every caller uses)."""
    return dict(OmegaConf.to_container(cfg.data.apply_chat_template_kwargs, resolve=True) or {})


def config_to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML (for logs and `agentrl config`)."""
    return OmegaConf.to_yaml(cfg)


def _source_name(
    config_path: str | Path | None, config_dir: str | Path | None, config_name: str | None
) -> str:
    if config_path is not None:
        return str(config_path)
    if config_name is not None:
        return f"config {config_name!r} in {config_dir or 'agentrl/config'}"
    return "the defaults"


def _unknown_problems(
    composed: DictConfig, defaults: DictConfig, parsed: Sequence[Override], source: str
) -> list[str]:
    """Unknown keys, each attributed to the override that set it, else to the YAML."""
    problems: list[str] = []
    from_overrides: list[str] = []
    for override in parsed:
        if override.kind != "set" or override.key.startswith("hydra.") or is_inert(override.key):
            continue
        layer = OmegaConf.create({})
        OmegaConf.update(layer, alias_of(override.key), override.value, force_add=True)
        found = _unknown_keys(layer, defaults, f"override {override.text!r}")
        problems.extend(found)
        from_overrides.extend(found)
    for problem in _unknown_keys(composed, defaults, source):
        key = problem.split(" (from ", 1)[0]
        if not any(p.split(" (from ", 1)[0] == key for p in from_overrides):
            problems.append(problem)
    return problems


def _apply_deletions(
    merged: DictConfig, defaults: DictConfig, parsed: Sequence[Override]
) -> list[str]:
    """`~key`: remove an entry of an open mapping; put any other key back to its default."""
    problems = []
    for override in parsed:
        if override.kind != "delete" or is_inert(override.key):
            continue
        key = alias_of(override.key)
        parent, leaf = parent_of(merged, key)
        if not isinstance(parent, DictConfig) or leaf not in parent:
            problems.append(f"override {override.text!r}: there is no key {key} to delete")
            continue
        default_parent, _ = parent_of(defaults, key)
        if not isinstance(default_parent, DictConfig) or leaf not in default_parent:
            del parent[leaf]
            continue
        node = default_parent._get_node(leaf)  # unresolved: an interpolation stays one
        parent[leaf] = OmegaConf.create(node) if isinstance(node, DictConfig) else node._value()
    return problems


def _unknown_keys(layer: Any, defaults: Any, source: str, prefix: str = "") -> list[str]:
    """Keys of `layer` that `defaults` does not have (open {} mappings take any key)."""
    if not isinstance(layer, DictConfig) or not isinstance(defaults, DictConfig):
        return []
    if len(defaults) == 0:  # an open mapping
        return []
    problems = []
    for key in layer:
        path = f"{prefix}{key}"
        if key not in defaults:
            problems.append(_unknown_key_message(str(key), defaults, prefix, source))
            continue
        child = defaults._get_node(key)
        if isinstance(child, DictConfig) and not child._is_interpolation():
            sub = layer._get_node(key)
            if isinstance(sub, DictConfig):
                problems.extend(_unknown_keys(sub, child, source, f"{path}."))
            elif sub is not None and not sub._is_none() and len(child) > 0:
                problems.append(f"{path} (from {source}) must be a mapping of "
                                f"{', '.join(map(str, child))}")
    return problems


def _unknown_key_message(key: str, siblings: DictConfig, prefix: str, source: str) -> str:
    names = [str(k) for k in siblings]
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
    hint = (f"did you mean {', '.join(prefix + c for c in close)}?" if close
            else f"valid keys under {prefix.rstrip('.') or 'the top level'}: {', '.join(names)}")
    return f"unknown config key {prefix}{key!s} (from {source}); {hint}"


def _type_problems(value: Any, default: Any, path: str) -> list[str]:
    """Compare the merged tree against the defaults' types, leaf by leaf."""
    if isinstance(default, Mapping):
        if not isinstance(value, Mapping):
            return [f"{path} must be a mapping, got {_type_name(value)}"]
        if not default:  # open mapping: anything goes
            return []
        problems = []
        for key, sub_default in default.items():
            problems.extend(_type_problems(value[key], sub_default, f"{path}.{key}" if path
                                           else str(key)))
        return problems
    expected = NULLABLE_TYPES.get(path) if default is None else _leaf_type(default)
    expected = MIXED_TYPES.get(path, expected)
    if expected is None or _matches(value, expected, nullable=path in NULLABLE_TYPES):
        return []
    names = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple)
                                             else (expected,)))
    return [f"{path} must be {names}, got {value!r} ({_type_name(value)})"]


def _leaf_type(default: Any) -> type | tuple[type, ...]:
    if isinstance(default, bool):
        return bool
    if isinstance(default, float):
        return (float, int)
    if isinstance(default, int):
        return int
    if isinstance(default, list):
        return list
    return type(default)


def _matches(value: Any, expected: type | tuple[type, ...], nullable: bool) -> bool:
    if value is None:
        return nullable
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__
