"""Each root sandbox server on a host claims a uid range of its own.

A root server runs slot *k* as uid ``uid_base + k`` and ends a run's stragglers, and a crashed
server's orphans, by uid. Two servers sharing uids would end each other's runs. So a server
holds an exclusive ``flock`` on one lock file per uid of its range for as long as it lives
(the kernel drops the locks when its process dies, however it dies). When another live server
holds any uid of the configured range, the server moves to the next free range above it and
logs where it went; ``GET /health`` shows the ``uid_base`` it uses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import tempfile
from pathlib import Path

from envs.sandbox.config import SandboxConfig

logger = logging.getLogger(__name__)

MAX_TRIES = 64  # ranges tried above the configured one before giving up


def lock_dir() -> Path:
    """Where the per-uid lock files live: one place every server on the host agrees on."""
    run_lock = Path("/run/lock")
    base = run_lock if run_lock.is_dir() and os.access(run_lock, os.W_OK) else Path(
        tempfile.gettempdir())
    path = base / "agentrl-sandbox-uids"
    path.mkdir(mode=0o755, exist_ok=True)
    return path


class UidRange:
    """The locks on ``base .. base + size - 1``; ``release`` gives them back."""

    def __init__(self, base: int, size: int, fds: list[int]) -> None:
        self.base, self.size, self._fds = base, size, fds

    def release(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the descriptor drops its flock
        self._fds = []

    def __del__(self) -> None:  # an app dropped without its lifespan's end (tests, scripts)
        self.release()


def _try_lock(directory: Path, base: int, size: int) -> UidRange | None:
    fds: list[int] = []
    for uid in range(base, base + size):
        fd = os.open(directory / f"uid-{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            UidRange(base, size, fds).release()
            return None
        fds.append(fd)
    return UidRange(base, size, fds)


def claim_uid_range(config: SandboxConfig) -> tuple[SandboxConfig, UidRange | None]:
    """Lock a free range of ``max_concurrent`` uids, starting at ``config.uid_base``.

    Returns the config with the ``uid_base`` claimed and the held range; a non-root server
    runs no per-run uids and claims nothing (``None``). Raises ``RuntimeError`` when
    ``MAX_TRIES`` ranges are all held.
    """
    if os.geteuid() != 0:
        return config, None
    directory, size = lock_dir(), config.max_concurrent
    for attempt in range(MAX_TRIES):
        base = config.uid_base + attempt * size
        held = _try_lock(directory, base, size)
        if held is None:
            continue
        if attempt:
            logger.warning(
                "sandbox: uids %d..%d are in use by another sandbox server on this host; "
                "this server runs as uids %d..%d", config.uid_base,
                config.uid_base + size - 1, base, base + size - 1)
        return dataclasses.replace(config, uid_base=base), held
    raise RuntimeError(
        f"sandbox: no free uid range of {size} from uid_base {config.uid_base}: "
        f"{MAX_TRIES} ranges are held by other sandbox servers (locks in {directory}); "
        "give this server another --uid-base")
