"""Whether a command can write the directory it was given, checked before it starts.

    check_writable_dir(Path("outputs/run"), "--out-dir")   # ValueError naming the flag

A directory a run will make (`mkdir -p`) must be one already, or not exist under a
directory this process can write: a file in the way, or a place it cannot write, is
refused before any work, not found by the first write minutes later.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


def check_writable_dir(path: Path, flag: str) -> None:
    """ValueError unless `path` is, or can be made as, a directory this process writes
    (`flag`: the option that gave it, for the message)."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} is a file, not a directory")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {path} is under {existing}, which is a file, not a directory")
    try:  # access() says yes to root on a read-only place; a file made there does not
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot write in {existing} "
                         f"({err.strerror or err})") from err


__all__ = ["check_writable_dir"]
