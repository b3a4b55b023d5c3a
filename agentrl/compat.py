"""Old public names, kept working in one place: the table of moved modules and renamed names.

A module that moved has no file at its old path. `import agentrl` calls `install`, which
puts one meta-path finder first on `sys.meta_path`:

- each old path in MOVED_MODULES is served as the new module (the very same object:
  classes compare equal and `isinstance` holds), with a DeprecationWarning that names the
  new path;
- each module of RENAMED_NAMES gets, as it is imported, a module `__getattr__` that serves
  its old names as the new ones, with a DeprecationWarning (the module itself holds no
  trace of its old names).

To move a module: move it and add `old: new` to MOVED_MODULES; to rename a public class or
function: rename it and add it to RENAMED_NAMES. tests/test_compat.py imports every old path
and name, and fails if a module made only of re-exports and a deprecation warning
reappears.

Its layer: it names modules of every layer, by string, so it sits at the top (beside
`cli`, `pyproject.toml`'s contract) and nothing in agentrl imports it but
`agentrl/__init__.py`; it imports no agentrl module at import time.
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

# Only the old names an issue promised are kept (issue 57: nothing has been released, so the
# rest went). Issue 26 promised aliases for "import paths in docs": the modules its renames
# moved that the docs of the time named. Issue 45 promised the old names of the two
# `batch_metrics` it listed.

# old import path -> new import path
MOVED_MODULES: dict[str, str] = {
    "agentrl.rollout.chat": "agentrl.models.chat",
    "agentrl.data.arithmetic": "agentrl.tasks.arithmetic",
    "agentrl.data.arithmetic_sft": "agentrl.tasks.arithmetic_sft",
    "agentrl.data.code_arithmetic": "agentrl.tasks.code_arithmetic",
    "agentrl.data.search_facts": "agentrl.tasks.search_facts",
    "agentrl.quickstart.tasks": "agentrl.tasks.quickstart",
    "agentrl.quickstart.search_task": "agentrl.tasks.search_task",
    "agentrl.quickstart.retool_task": "agentrl.tasks.retool_task",
    "agentrl.trainer.async_trainer": "agentrl.trainer.off_policy",
    "agentrl.trainer.async_rollout": "agentrl.trainer.producer",
}

# module -> {old name: new name} (the module serves the old name as the new one)
RENAMED_NAMES: dict[str, dict[str, str]] = {
    "agentrl.trainer.off_policy": {"AsyncPPOTrainer": "OffPolicyTrainer"},
    "agentrl.rollout.output": {"batch_metrics": "request_metrics"},
    "agentrl.trainer.metrics": {"batch_metrics": "train_step_metrics"},
}


def renamed_attributes(module: str, renamed: dict[str, str] | None = None) -> Callable[[str], Any]:
    """A module `__getattr__` that serves each old name of MODULE (RENAMED_NAMES[module], or
    RENAMED when given: old -> new) as the module's new attribute, with a DeprecationWarning
    (`install` gives it to the modules of RENAMED_NAMES; no module needs to call this)."""
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


def serve_renamed_names(module: ModuleType, renamed: dict[str, str]) -> None:
    """Give MODULE a `__getattr__` that serves RENAMED's old names (old -> new), chained
    to the module's own `__getattr__` when it has one."""
    own = module.__dict__.get("__getattr__")
    if getattr(own, "__agentrl_renamed__", False):
        return  # already served
    name_of_module = module.__name__

    def __getattr__(name: str) -> Any:
        if name in renamed:
            warnings.warn(f"{name_of_module}.{name} is deprecated: it is "
                          f"{name_of_module}.{renamed[name]} now", DeprecationWarning,
                          stacklevel=2)  # fmt: skip
            return getattr(module, renamed[name])
        if own is not None:
            return own(name)
        raise AttributeError(f"module {name_of_module!r} has no attribute {name!r}")

    __getattr__.__agentrl_renamed__ = True  # type: ignore[attr-defined]
    module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _ServeRenamedNames(importlib.abc.Loader):
    """Runs a module's own loader, then serves the module's old names (RENAMED_NAMES).
    Everything else is the module's own loader's (`python -m` asks it for `get_code`)."""

    def __init__(self, loader: importlib.abc.Loader, renamed: dict[str, str]) -> None:
        self.loader = loader
        self.renamed = renamed

    def __getattr__(self, name: str) -> Any:  # get_code, get_source, is_package, ...
        return getattr(self.loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader  # the module keeps its own loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        serve_renamed_names(module, self.renamed)


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of MOVED (old -> new), and the modules of RENAMED (module ->
    {old: new}) to serve their old names; nothing else."""

    def __init__(self, moved: dict[str, str],
                 renamed: dict[str, dict[str, str]] | None = None) -> None:  # fmt: skip
        self.moved = moved
        self.renamed = renamed or {}

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:  # fmt: skip
        new = self.moved.get(fullname)
        if new is not None:
            return importlib.machinery.ModuleSpec(fullname, _MovedModuleLoader(new))
        renamed = self.renamed.get(fullname)
        if renamed is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _ServeRenamedNames(spec.loader, renamed)
        return spec


def install() -> None:
    """Put the finder of MOVED_MODULES and RENAMED_NAMES first on sys.meta_path (once per
    process), and serve the old names of the modules already imported."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder(MOVED_MODULES, RENAMED_NAMES))
    for name, renamed in RENAMED_NAMES.items():
        if name in sys.modules:
            serve_renamed_names(sys.modules[name], renamed)


__all__ = ["MOVED_MODULES", "RENAMED_NAMES", "MovedModuleFinder", "install",
           "renamed_attributes", "serve_renamed_names"]  # fmt: skip
