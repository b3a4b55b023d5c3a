"""The one plugin loader of the project: turn a path string into a Python object.

Two forms are accepted:

    "pkg.mod.Name"            import ``pkg.mod`` (from ``sys.path``), take ``Name``;
                              nested attributes work too (``pkg.mod.Outer.Inner``)
    "path/to/file.py:Name"    load that file as a module, take ``Name``

A relative file path is looked up in the current directory first, then in ``base_dir``
(the directory of the config that names it). Loading the same file twice returns the same
module, so classes compare equal. With ``expected_base`` the object must be a subclass of it.
Every failure raises ``PluginLoadError`` naming the path and what went wrong: a module of the
dotted path that does not exist is named as the missing module (``tools.calculatr`` in
``tools.calculatr.CalculatorTool``), a missing name gets the module's closest names.

Before importing, the loader runs the hooks registered with `before_load` (once each):
`import agentrl` registers the one that installs agentrl's stand-ins for verl's module
paths (agentrl/verl_compat.py), so a plugin written for verl loads where verl is not
installed. A stand-in finder that knows a package but not the module asked for raises
`StandInMissing`, which the loader reports as is.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

_FILE_MODULE_PREFIX = "agentrl_plugin_"
_file_lock = threading.Lock()


class PluginLoadError(ImportError):
    """A plugin path could not be loaded (bad syntax, import error, missing name, wrong type)."""


class StandInMissing(ModuleNotFoundError):
    """A module of a package a stand-in finder serves, which it does not stand in for."""


_BEFORE_LOAD: list[Callable[[], None]] = []


def before_load(hook: Callable[[], None]) -> None:
    """Run HOOK before every load (a finder's `install`: it must be idempotent)."""
    if hook not in _BEFORE_LOAD:
        _BEFORE_LOAD.append(hook)


def load_object(
    path: str, expected_base: type | None = None, *, base_dir: str | Path | None = None
) -> Any:
    """Load the object ``path`` names; see the module docstring for the accepted forms."""
    if not isinstance(path, str) or not path.strip():
        raise PluginLoadError(f"plugin path must be a non-empty string, got {path!r}")
    path = path.strip()
    for hook in _BEFORE_LOAD:
        hook()
    if ":" in path and (path.rsplit(":", 1)[0].endswith(".py")):
        file_part, attr_path = path.rsplit(":", 1)
        module = _load_file_module(file_part, base_dir, path)
        missing = None
    else:
        module, attr_path, missing = _import_longest_module(path)
    obj = _get_attr_path(module, attr_path, path, missing)
    if expected_base is not None:
        if not isinstance(obj, type):
            raise PluginLoadError(
                f"{path!r} is a {type(obj).__name__}, expected a subclass of "
                f"{expected_base.__module__}.{expected_base.__qualname__}"
            )
        if not issubclass(obj, expected_base):
            raise PluginLoadError(
                f"{path!r} ({obj.__module__}.{obj.__qualname__}) is not a subclass of "
                f"{expected_base.__module__}.{expected_base.__qualname__}"
            )
    return obj


def _import_longest_module(path: str) -> tuple[ModuleType, str, str | None]:
    """Import the longest importable prefix of a dotted path; return it, the rest, and the
    longer prefix that is no module (None when the next part is the only thing left)."""
    parts = path.split(".")
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        raise PluginLoadError(
            f"{path!r} is not a plugin path: use 'package.module.Name' or 'path/to/file.py:Name'"
        )
    first_error: BaseException | None = None
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            missing = ".".join(parts[: cut + 1]) if cut < len(parts) - 1 else None
            return importlib.import_module(module_name), ".".join(parts[cut:]), missing
        except StandInMissing as err:
            raise PluginLoadError(f"cannot import {path!r}: {err}") from err
        except ModuleNotFoundError as err:
            # Only "this prefix is not a module" means: try a shorter prefix. A module
            # that exists but fails to import its own dependency is a real error.
            if err.name is not None and not (
                module_name == err.name or module_name.startswith(err.name + ".")
            ):
                raise PluginLoadError(
                    f"cannot import {path!r}: module {module_name!r} failed: {err}"
                ) from err
            first_error = first_error or err
        except Exception as err:  # the module exists but raised while importing
            raise PluginLoadError(
                f"cannot import {path!r}: module {module_name!r} raised {type(err).__name__}: {err}"
            ) from err
    raise PluginLoadError(f"cannot import {path!r}: {first_error}") from first_error


def _resolve_file(file_part: str, base_dir: str | Path | None, path: str) -> Path:
    candidate = Path(file_part).expanduser()
    candidates = [candidate]
    if not candidate.is_absolute() and base_dir is not None:
        candidates.append(Path(base_dir) / candidate)
    for c in candidates:
        if c.is_file():
            return c.resolve()
    tried = ", ".join(str(c) for c in candidates)
    raise PluginLoadError(f"cannot load {path!r}: file not found (tried {tried})")


def _load_file_module(file_part: str, base_dir: str | Path | None, path: str) -> ModuleType:
    file = _resolve_file(file_part, base_dir, path)
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:12]
    module_name = f"{_FILE_MODULE_PREFIX}{file.stem}_{digest}"
    with _file_lock:
        if module_name in sys.modules:
            return sys.modules[module_name]
        spec = importlib.util.spec_from_file_location(module_name, file)
        if spec is None or spec.loader is None:
            raise PluginLoadError(f"cannot load {path!r}: {file} is not a Python module")
        module = importlib.util.module_from_spec(spec)
        # Registered before executing, as `import` does, so dataclasses and pickle by
        # reference find the module.
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as err:
            del sys.modules[module_name]
            raise PluginLoadError(
                f"cannot load {path!r}: {file} raised {type(err).__name__}: {err}"
            ) from err
    return module


def _get_attr_path(module: ModuleType, attr_path: str, path: str,
                   missing: str | None = None) -> Any:  # fmt: skip
    """``module.attr_path``; ``missing``: the module the next part would have been."""
    obj: Any = module
    for i, name in enumerate(attr_path.split(".")):
        if not name.isidentifier():
            raise PluginLoadError(f"{path!r}: {attr_path!r} is not a valid attribute name")
        try:
            obj = getattr(obj, name)
        except AttributeError:
            if i == 0 and missing is not None:  # `pkg.typo.Name`: the module is what is missing
                raise PluginLoadError(
                    f"cannot import {path!r}: no module named {missing!r}") from None
            close = difflib.get_close_matches(name, [n for n in dir(obj) if not
                                                     n.startswith("_")], n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise PluginLoadError(
                f"cannot load {path!r}: module {module.__name__!r} has no attribute "
                f"{attr_path!r}{hint}"
            ) from None
    return obj
