"""Old public names, kept working in one place: the table of moved modules and renamed names.

A module that moved has no file at its old path. `import agentrl` installs a meta-path
finder (`install`) that serves each old path in MOVED_MODULES as the new module (the very
same object: classes compare equal and `isinstance` holds), with a DeprecationWarning that
names the new path. A renamed class or function keeps its old name through the table
RENAMED_NAMES and a module `__getattr__` the module takes from `renamed_attributes`:

    __getattr__ = renamed_attributes(__name__)

To move a module: move it, add `old: new` to MOVED_MODULES, and the test
(tests/test_compat.py) checks that the old path imports and warns. This module imports no
other agentrl module at import time (it sits at the lowest layer); it resolves the new
paths by name, only when an old path is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

# old import path -> new import path
MOVED_MODULES: dict[str, str] = {
    "agentrl.algos.registry": "agentrl.utils.registry",
    "agentrl.rollout.chat": "agentrl.models.chat",
    "agentrl.rollout.testing": "agentrl.testing.rollout",
    "agentrl.workers.testing": "agentrl.testing.workers",
    "agentrl.data.arithmetic": "agentrl.tasks.arithmetic",
    "agentrl.data.arithmetic_sft": "agentrl.tasks.arithmetic_sft",
    "agentrl.data.code_arithmetic": "agentrl.tasks.code_arithmetic",
    "agentrl.data.search_facts": "agentrl.tasks.search_facts",
    "agentrl.quickstart.tasks": "agentrl.tasks.quickstart",
    "agentrl.quickstart.search_task": "agentrl.tasks.search_task",
    "agentrl.quickstart.retool_task": "agentrl.tasks.retool_task",
    "agentrl.trainer.async_trainer": "agentrl.trainer.off_policy",
    "agentrl.trainer.async_rollout": "agentrl.trainer.producer",
    "agentrl.utils.deprecation": "agentrl.compat",
}

# module -> {old name: new name} (the module serves the old name as the new one)
RENAMED_NAMES: dict[str, dict[str, str]] = {
    "agentrl.trainer.off_policy": {"AsyncPPOTrainer": "OffPolicyTrainer"},
    "agentrl.rollout.sharded": {"AgentWorker": "EngineWorker"},
    "agentrl.rollout.output": {"batch_metrics": "request_metrics"},
    "agentrl.trainer.metrics": {"batch_metrics": "train_step_metrics"},
}


def renamed_attributes(module: str, renamed: dict[str, str] | None = None) -> Callable[[str], Any]:
    """A module `__getattr__` that serves each old name of MODULE (RENAMED_NAMES[module], or
    RENAMED when given: old -> new) as the module's new attribute, with a DeprecationWarning."""
    table = dict(RENAMED_NAMES.get(module, {}) if renamed is None else renamed)

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is deprecated: it is {module}.{table[name]} now",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
        return getattr(sys.modules[module], table[name])

    return __getattr__


class _MovedModuleLoader(importlib.abc.Loader):
    """Loads an old path by importing the new one and putting it in the old path's place."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder module; exec_module replaces it in sys.modules

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        warnings.warn(
            f"{old} moved to {self.new}; import it from there (the old path will be removed)",
            DeprecationWarning,
            stacklevel=2,  # the importing line: the import machinery's frames are skipped
        )
        # The import system returns whatever sys.modules holds for OLD once this returns,
        # so OLD gives the new module itself (its own __spec__ untouched).
        sys.modules[old] = importlib.import_module(self.new)


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of MOVED (old -> new) and nothing else."""

    def __init__(self, moved: dict[str, str]) -> None:
        self.moved = moved

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:  # fmt: skip
        new = self.moved.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedModuleLoader(new))


def install() -> None:
    """Put the finder of MOVED_MODULES on sys.meta_path (once per process)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder(MOVED_MODULES))


__all__ = ["MOVED_MODULES", "RENAMED_NAMES", "MovedModuleFinder", "install",
           "renamed_attributes"]  # fmt: skip
