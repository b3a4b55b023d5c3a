"""verl's import paths, served by agentrl's equivalents when verl is not installed.

A verl tool YAML names `verl.tools.gsm8k_tool.Gsm8kTool`; a user's tool or reward file
written for verl imports `verl.tools.base_tool`, `verl.tools.schemas`,
`verl.utils.reward_score.gsm8k` or `verl.utils.rollout_trace`. With `install_verl_paths()`
those imports resolve to agentrl's modules (the table `MODULES`: verl's name -> agentrl's module
and the names verl spells differently), so such files run unmodified. Every mapped module
is logged once at INFO ("verl.tools.base_tool -> agentrl.tools.base").

`install_verl_paths()` appends an import finder at the end of `sys.meta_path`: it is asked
only after every normal finder failed, so an installed verl is always imported, never shadowed (the
finder also steps aside for good once a real `verl` is in `sys.modules`). `import agentrl`
imports this module, which registers `install_verl_paths` with the plugin loader
(`agentrl.plugins.before_load`): the finder is installed before the loader imports a tool
class, reward function, dataset or sampler. A `verl.*` module not in the table is an import
error that lists the table.

Its layer: the table names modules of `tools`, `data` and `reward` (and the tool plugins of
the top-level `tools` package, by plugin path), so this module sits above those layers
(`pyproject.toml`'s contract; `tests/test_layers.py` checks that every path of the table
is below it) and nothing in agentrl imports it but `agentrl/__init__.py`.

`verl.utils.rollout_trace`'s decorators are no-ops here (`rollout_trace_op` returns the
function unchanged; agentrl records trajectories with `trainer.rollout_data_dir`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from agentrl.plugins import StandInMissing, before_load

logger = logging.getLogger(__name__)

# verl module -> (agentrl module or None for an empty package, {verl name: agentrl name})
MODULES: dict[str, tuple[str | None, dict[str, str]]] = {
    "verl": (None, {}),
    "verl.tools": (None, {}),
    "verl.tools.base_tool": ("agentrl.tools.base", {}),
    "verl.tools.schemas": ("agentrl.tools.schemas", {}),
    "verl.tools.gsm8k_tool": ("tools.gsm8k", {}),
    "verl.tools.search_tool": ("tools.search", {}),
    "verl.tools.sandbox_fusion_tools": ("tools.sandbox", {"SandboxFusionTool": "SandboxTool"}),
    "verl.utils": (None, {}),
    "verl.experimental": (None, {}),
    "verl.experimental.dataset": (None, {}),
    "verl.experimental.dataset.sampler": ("agentrl.data.sampler", {}),
    "verl.utils.reward_score": ("agentrl.reward.score", {}),
    "verl.utils.reward_score.gsm8k": ("agentrl.reward.score.gsm8k", {}),
    "verl.utils.reward_score.math": ("agentrl.reward.score.math", {}),
    "verl.utils.reward_score.math_reward": ("agentrl.reward.score.math", {}),
    "verl.utils.reward_score.search_r1_like_qa_em": (
        "agentrl.reward.score.search_r1", {"compute_score": "compute_score_verl"}),
    "verl.utils.rollout_trace": (
        "agentrl.verl_compat",
        {"rollout_trace_op": "rollout_trace_op", "rollout_trace_attr": "rollout_trace_attr",
         "RolloutTraceConfig": "RolloutTraceConfig"}),
}


class MissingVerlModule(StandInMissing):
    """A `verl.*` module agentrl does not stand in for (and verl is not installed)."""


def rollout_trace_op(func: Callable) -> Callable:
    """verl's tracing decorator; agentrl does not trace through it (returns `func`)."""
    return func


@contextlib.contextmanager
def rollout_trace_attr(*args: Any, **kwargs: Any) -> Iterator[None]:
    """verl's trace-attribute context; a no-op here."""
    yield


class RolloutTraceConfig:
    """verl's trace configuration singleton; `init` records nothing (no trace backend)."""

    @classmethod
    def init(cls, *args: Any, **kwargs: Any) -> None:
        return None

    @classmethod
    def get_backend(cls) -> None:
        return None

    @classmethod
    def enable_token2text(cls) -> bool:
        return False


def _public(module: ModuleType) -> dict[str, Any]:
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    return {name: getattr(module, name) for name in names if hasattr(module, name)}


class _VerlFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `verl.*` modules in `MODULES` when no real verl is importable."""

    def __init__(self) -> None:
        self.logged: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "verl" and not fullname.startswith("verl."):
            return None
        real = sys.modules.get("verl")
        if real is not None and not getattr(real, "__agentrl_verl_compat__", False):
            return None  # a real verl is imported: never mix
        if fullname not in MODULES:
            raise MissingVerlModule(
                f"No module named {fullname!r}: verl is not installed, and agentrl stands in "
                f"only for {', '.join(m for m in MODULES if MODULES[m][0])} (agentrl.verl_compat)",
                name=fullname,
            )
        is_package = any(other.startswith(fullname + ".") for other in MODULES)
        return importlib.util.spec_from_loader(fullname, self, is_package=is_package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        target, renamed = MODULES[module.__name__]
        module.__agentrl_verl_compat__ = True
        module.__doc__ = f"agentrl's stand-in for {module.__name__} (agentrl.verl_compat)"
        if target is None:
            return
        source = importlib.import_module(target)
        if target != __name__:
            module.__dict__.update(_public(source))
        for verl_name, agentrl_name in renamed.items():
            setattr(module, verl_name, getattr(source, agentrl_name))
        if module.__name__ not in self.logged:
            self.logged.add(module.__name__)
            logger.info("verl is not installed: %s -> %s (agentrl.verl_compat)",
                        module.__name__, target)


_FINDER = _VerlFinder()


def install_verl_paths() -> None:
    """Serve `verl.*` imports from agentrl where verl is not installed (idempotent)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)


before_load(install_verl_paths)


__all__ = ["MODULES", "MissingVerlModule", "RolloutTraceConfig", "install_verl_paths",
           "rollout_trace_attr", "rollout_trace_op"]
