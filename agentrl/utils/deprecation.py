"""Old import paths that keep working after a module moved, with a DeprecationWarning.

A moved module's old file is two lines:

    from agentrl.utils.deprecation import moved_module
    moved_module(__name__, "agentrl.utils.registry")

After that, `import OLD` and `from OLD import NAME` give the new module (the very same
object: classes compare equal and `isinstance` holds) and warn once per process.
"""

from __future__ import annotations

import importlib
import sys
import warnings


def moved_module(old: str, new: str) -> None:
    """Make module OLD (being imported) an alias of module NEW, warning that it moved."""
    warnings.warn(
        f"{old} moved to {new}; import it from there (the old path will be removed)",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)
