"""Old import paths that keep working after a module moved, with a DeprecationWarning.

A moved module's old file is two lines:

    from agentrl.utils.deprecation import moved_module
    moved_module(__name__, "agentrl.utils.registry")

After that, `import OLD` and `from OLD import NAME` give the new module (the very same
object: classes compare equal and `isinstance` holds) and warn once per process. A renamed
class or function keeps its old name through `renamed_attributes` (a module `__getattr__`).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any


def moved_module(old: str, new: str) -> None:
    """Make module OLD (being imported) an alias of module NEW, warning that it moved."""
    warnings.warn(
        f"{old} moved to {new}; import it from there (the old path will be removed)",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)


def renamed_attributes(module: str, renamed: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` that serves each old name in RENAMED (old -> new) as the
    module's new attribute, with a DeprecationWarning:

        __getattr__ = renamed_attributes(__name__, {"AsyncPPOTrainer": "OffPolicyTrainer"})
    """

    def __getattr__(name: str) -> Any:
        if name not in renamed:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is deprecated: it is {module}.{renamed[name]} now",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
        return getattr(sys.modules[module], renamed[name])

    return __getattr__
