"""Read an interaction config (verl's YAML format) into interaction objects.

    interaction:
      - name: arithmetic                                   # what interaction_kwargs.name picks
        class_name: envs.interactions.arithmetic.AnswerCheckInteraction  # or file.py:Class
        config: {max_attempts: 3}

``load_interactions(path)`` returns ``{name: interaction}``. A missing ``name`` defaults to
the class name without ``Interaction``, lower-cased (``Gsm8kInteraction`` -> ``gsm8k``).
Classes are loaded with ``agentrl.plugins.load_object`` (relative ``.py`` paths are looked
up in the current directory, then next to the YAML). Problems raise
``InteractionConfigError`` naming the entry. ``import_interaction_classes(path)`` imports the
classes without building them, each error naming the file and the line of the entry's
``class_name`` (what a run checks before its workers start).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from agentrl.interactions.base import BaseInteraction
from agentrl.plugins import PluginLoadError, load_object
from agentrl.utils.yaml_lines import entry_key_lines

logger = logging.getLogger(__name__)


class InteractionConfigError(ValueError):
    """An interaction config entry is malformed, cannot be loaded, or clashes with another."""


def _read(source: str | os.PathLike | Mapping) -> tuple[list[Any], Path | None]:
    base_dir = None
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise InteractionConfigError(f"interaction config file not found: {path}")
        try:
            source = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise InteractionConfigError(
                f"interaction config {path} is not valid YAML: {err}"
            ) from err
        base_dir = path.resolve().parent
    if not isinstance(source, Mapping) or "interaction" not in source:
        raise InteractionConfigError("interaction config must have a top-level 'interaction:' list")
    entries = source["interaction"] or []
    if not isinstance(entries, list):
        raise InteractionConfigError(
            f"'interaction' must be a list of entries, got {type(entries).__name__}"
        )
    return entries, base_dir


def default_name(class_name: str) -> str:
    """``pkg.mod.Gsm8kInteraction`` -> ``gsm8k``."""
    short = class_name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    return (short[: -len("Interaction")] if short.endswith("Interaction") else short).lower()


def import_interaction_classes(path: str | os.PathLike) -> list[type[BaseInteraction]]:
    """Import each entry's class of the interaction config file ``path``, building none; a
    problem raises ``InteractionConfigError`` that begins with ``FILE, line N:``."""
    entries, base_dir = _read(path)
    lines = entry_key_lines(path, "interaction", "class_name")
    classes = []
    for i, entry in enumerate(entries):
        where = f"{path}, line {lines[i]}: " if i in lines else f"{path}: "
        class_name = entry.get("class_name") if isinstance(entry, Mapping) else None
        if not isinstance(class_name, str) or not class_name:
            raise InteractionConfigError(f"{where}interaction config entry {i}: 'class_name' "
                                         "must be a non-empty string")
        try:
            classes.append(load_object(class_name, BaseInteraction, base_dir=base_dir))
        except PluginLoadError as err:
            raise InteractionConfigError(
                f"{where}interaction config entry {i} (class_name {class_name!r}): {err}"
            ) from err
    return classes


def load_interactions(source: str | os.PathLike | Mapping) -> dict[str, BaseInteraction]:
    """Import and build every interaction of a config; returns ``{name: interaction}``."""
    entries, base_dir = _read(source)
    interactions: dict[str, BaseInteraction] = {}
    for i, entry in enumerate(entries):
        label = f"interaction config entry {i}"
        if not isinstance(entry, Mapping):
            raise InteractionConfigError(f"{label}: must be a mapping, got {type(entry).__name__}")
        unknown = sorted(set(entry) - {"name", "class_name", "config"})
        if unknown:
            raise InteractionConfigError(f"{label}: unknown keys {unknown}")
        class_name = entry.get("class_name")
        if not isinstance(class_name, str) or not class_name:
            raise InteractionConfigError(f"{label}: 'class_name' must be a non-empty string")
        label = f"{label} (class_name {class_name!r})"
        config = dict(entry.get("config") or {})
        name = str(entry.get("name") or default_name(class_name))
        if name in interactions:
            raise InteractionConfigError(f"{label}: interaction name {name!r} is used twice")
        try:
            cls = load_object(class_name, BaseInteraction, base_dir=base_dir)
        except PluginLoadError as err:
            raise InteractionConfigError(f"{label}: {err}") from err
        try:
            interactions[name] = cls({**config, "name": name})
        except Exception as err:
            raise InteractionConfigError(
                f"{label}: constructing it raised {type(err).__name__}: {err}"
            ) from err
    logger.info("loaded interactions: %s", ", ".join(interactions) or "(none)")
    return interactions
