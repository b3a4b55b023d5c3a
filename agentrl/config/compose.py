"""Compose a user's config the way verl's entry point does, with Hydra's compose API.

    tree, deletions = compose_user_config(config_dir="my_verl_configs", config_name="gsm8k",
                                          overrides=["data.train_batch_size=8", "~trainer.seed"])

verl's run scripts pass `--config-path DIR --config-name NAME` and Hydra overrides; their
config YAMLs start with a `defaults:` list (`- ppo_trainer`, `- _self_`) and name verl's own
config directory in `hydra.searchpath`. Here `agentrl/config` is put first on the search
path, so `ppo_trainer` (and `ppo_megatron_trainer`) resolve to agentrl's defaults even when
verl's directory is there too; the user's other search-path entries stay after it.

Overrides follow Hydra's grammar (`key=value`, `+key=value`, `++key=value`, `~key`). Two
differences, both because every valid key already exists in agentrl's defaults tree:

- `key=value` and `+key=value` are applied as `++key=value` (set, whether or not the
  composed file has the key); the loader then reports keys that do not exist in the defaults
  with the closest valid names, instead of Hydra's "Could not override".
- `~key` is not applied here but returned in `deletions`: the loader applies it after the
  defaults are merged in, where it removes an entry of an open mapping or puts a key back to
  its default.

A YAML without a `defaults:` list (an agentrl recipe holding only what differs) composes to
just its own keys; the loader merges it over the defaults either way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

AGENTRL_SEARCH_PATH = "pkg://agentrl.config"
DEFAULT_CONFIG_NAME = "ppo_trainer"


class ComposeError(ValueError):
    """The config files or overrides could not be composed; the message says why."""


@dataclass(frozen=True)
class Override:
    """One command-line override, parsed with Hydra's grammar."""

    text: str  # as given
    key: str  # dotted key
    kind: str  # "set" | "delete"
    value: object = None  # the parsed value (set)


def parse_overrides(overrides: Iterable[str]) -> list[Override]:
    """Parse `key=value`, `+key=value`, `++key=value` and `~key` with Hydra's parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            override = parser.parse_override(text.strip())
        except HydraException as exc:
            raise ComposeError(f"cannot parse override {text!r}: {exc}") from exc
        if not override.key_or_group:
            raise ComposeError(f"override {text!r} is not of the form key.sub=value")
        if override.is_sweep_override():
            raise ComposeError(
                f"override {text!r} is a sweep (a,b,... or a range); one run takes one value "
                "(quote a value with a comma: key='a,b')"
            )
        if override.type == OverrideType.DEL:
            parsed.append(Override(text, override.key_or_group, "delete"))
        else:
            parsed.append(Override(text, override.key_or_group, "set", override.value()))
    return parsed


def compose_user_config(
    *,
    config_file: str | Path | None = None,
    config_dir: str | Path | None = None,
    config_name: str | None = None,
    overrides: Iterable[str] = (),
) -> tuple[DictConfig, list[Override]]:
    """The composed tree (interpolations unresolved) and every parsed override.

    `config_file` (a YAML path) is the same as `config_dir` = its folder and `config_name` =
    its stem. Without a name, the primary config is agentrl's `ppo_trainer`; without a
    directory, the name is one of agentrl's stock configs (agentrl/config). A relative
    `config_dir` is taken from the current directory.
    """
    if config_file is not None:
        if config_dir is not None or config_name is not None:
            raise ComposeError("give either a config file or --config-path/--config-name")
        path = Path(config_file)
        if not path.is_file():
            raise ComposeError(f"config file not found: {path}")
        config_dir, config_name = path.parent, path.name
    parsed = parse_overrides(overrides)
    if config_name is None:
        if config_dir is not None:
            raise ComposeError(f"--config-path {config_dir} needs --config-name")
        config_name = DEFAULT_CONFIG_NAME
    # as verl's entry point: without --config-path, the name is looked up in the stock configs
    config_dir = Path(config_dir or Path(__file__).parent).expanduser().resolve()
    name = str(config_name).removesuffix(".yaml").removesuffix(".yml")
    primary = _find_primary(config_dir, name)
    hydra_overrides = [
        f"hydra.searchpath={_search_path(primary)}",
        *(_as_hydra(o) for o in parsed if o.kind == "set"),
    ]
    return _compose(config_dir, primary.name.rsplit(".", 1)[0], hydra_overrides), parsed


def _find_primary(config_dir: Path, name: str) -> Path:
    if not config_dir.is_dir():
        raise ComposeError(f"config directory not found: {config_dir}")
    for suffix in (".yaml", ".yml"):
        candidate = config_dir / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
    found = sorted(p.stem for p in config_dir.glob("*.y*ml"))
    raise ComposeError(
        f"config {name!r} not found in {config_dir} (it holds: {', '.join(found) or 'no YAML'})"
    )


def _search_path(primary: Path) -> str:
    """agentrl's config directory first, then the file's own `hydra.searchpath` entries."""
    try:
        raw = OmegaConf.load(primary)
    except Exception as exc:  # yaml errors and OmegaConf's own, reported the same way
        raise ComposeError(f"cannot parse {primary}: {exc}") from exc
    if not isinstance(raw, DictConfig):
        raise ComposeError(f"{primary}: the top level must be a mapping of config keys")
    theirs = [str(e) for e in OmegaConf.select(raw, "hydra.searchpath", default=None) or []]
    # verl's YAMLs name file://verl/trainer/config (relative to verl's checkout); where no
    # such directory is, Hydra would only warn, so it is left out quietly.
    kept = [e for e in theirs if e != AGENTRL_SEARCH_PATH
            and not (e.startswith("file://") and not Path(e[len("file://"):]).is_dir())]
    entries = [AGENTRL_SEARCH_PATH, *kept]
    return "[" + ",".join(f"'{e}'" for e in entries) + "]"


def _as_hydra(override: Override) -> str:
    """`key=value` / `+key=value` -> `++key=value` (see the module docstring)."""
    text = override.text.strip()
    if override.key.startswith("hydra.") or text.startswith("++"):
        return text
    return "++" + text.lstrip("+")


def _compose(config_dir: Path, name: str, overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if GlobalHydra.instance().is_initialized():
        raise ComposeError(
            "Hydra is already initialized in this process (inside a @hydra.main app?); "
            "call load_config outside it, or pass the composed config to the trainer"
        )
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            cfg = compose(config_name=name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ComposeError(f"cannot compose config {name!r} from {config_dir}: {exc}") from exc
    OmegaConf.set_struct(cfg, False)
    return cfg


__all__ = [
    "AGENTRL_SEARCH_PATH",
    "DEFAULT_CONFIG_NAME",
    "ComposeError",
    "Override",
    "compose_user_config",
    "parse_overrides",
]
