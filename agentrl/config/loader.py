"""Load the configuration tree: defaults <- user YAML <- command-line overrides.

    from agentrl.config import load_config
    cfg = load_config("recipes/quickstart/config.yaml", ["actor_rollout_ref.rollout.n=8"])
    cfg.actor_rollout_ref.rollout.n  # 8

The result is an OmegaConf `DictConfig`, resolved (no interpolations left), read-only and
in struct mode: every key exists with the type of its default, so code reads
`cfg.data.max_prompt_length` directly, never `cfg.get(...)`. Every problem found (an
unknown key, a value of the wrong type, batch sizes that disagree) is collected and
raised together as one `ConfigError` that names the keys.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from agentrl.config.validate import NULLABLE_TYPES, check_consistency

DEFAULT_CONFIG_PATH = Path(__file__).with_name("ppo_trainer.yaml")


class ConfigError(ValueError):
    """A configuration problem; the message names every offending key."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("invalid configuration:\n  - " + "\n  - ".join(self.problems))


def load_config(
    config_path: str | Path | None = None, overrides: Iterable[str] = ()
) -> DictConfig:
    """Return the validated config: defaults, then `config_path`, then `overrides`.

    `overrides` are `key.sub=value` strings (values parsed as YAML: `8`, `1e-6`, `null`,
    `[a,b]`); a leading `+` or `++` (Hydra's add/force-add) is accepted and ignored, since
    every valid key already exists in the defaults.
    """
    defaults = OmegaConf.load(DEFAULT_CONFIG_PATH)
    layers: list[tuple[str, DictConfig]] = []
    if config_path is not None:
        layers.append((str(config_path), _load_yaml(Path(config_path))))
    layers.extend(_parse_override(o) for o in overrides)

    problems: list[str] = []
    for source, layer in layers:
        problems.extend(_unknown_keys(layer, defaults, source))
    if problems:
        raise ConfigError(problems)

    try:
        merged = OmegaConf.merge(defaults, *(layer for _, layer in layers))
        OmegaConf.resolve(merged)
    except OmegaConfBaseException as exc:  # a bad interpolation, mostly
        raise ConfigError([f"cannot merge or resolve the configuration: {exc}"]) from exc

    resolved_defaults = OmegaConf.to_container(defaults, resolve=True)
    problems.extend(_type_problems(OmegaConf.to_container(merged), resolved_defaults, ""))
    if not problems:
        problems.extend(check_consistency(merged))
    if problems:
        raise ConfigError(problems)
    OmegaConf.set_struct(merged, True)
    OmegaConf.set_readonly(merged, True)
    return merged


def config_to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML (for logs and `agentrl config`)."""
    return OmegaConf.to_yaml(cfg)


def _load_yaml(path: Path) -> DictConfig:
    if not path.is_file():
        raise ConfigError([f"config file not found: {path}"])
    try:
        layer = OmegaConf.load(path)
    except Exception as exc:  # yaml.YAMLError and OmegaConf's own; report either the same way
        raise ConfigError([f"cannot parse {path}: {exc}"]) from exc
    if not isinstance(layer, DictConfig):
        raise ConfigError([f"{path}: the top level must be a mapping of config keys"])
    if "defaults" in layer or "hydra" in layer:
        raise ConfigError([
            f"{path}: Hydra 'defaults'/'hydra' sections are not supported; a recipe YAML holds "
            "only the keys that differ from agentrl/config/ppo_trainer.yaml"
        ])
    return layer


def _parse_override(override: str) -> tuple[str, DictConfig]:
    text = override.strip()
    if text.startswith("~"):
        raise ConfigError([f"override {override!r}: deleting keys (~key) is not supported"])
    text = text.lstrip("+")
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError([f"override {override!r} is not of the form key.sub=value"])
    try:
        layer = OmegaConf.from_dotlist([f"{key.strip()}={value}"])
    except OmegaConfBaseException as exc:
        raise ConfigError([f"cannot parse override {override!r}: {exc}"]) from exc
    return f"override {override!r}", layer


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
