"""The tokenization sanity check off the engine's event loop, in one worker process.

The check of a finished trajectory (agentrl/rollout/token_check.py: a template render of the
whole conversation, a decode, an encode, one more render per structured assistant turn)
costs the loop about as much as the rest of the request's events together, and it is mostly
jinja in Python: a thread would hold the interpreter lock just the same. So the engine
hands it to one long-lived process (`multi_turn.tokenization_sanity_check_offload`):

    offload = CheckOffload(tokenizer, chat_template_kwargs)
    offload.start()                                  # spawns the process, returns at once
    result = await offload.check(item, renderer)     # a CheckResult, as run_check's
    offload.close()                                  # with the engine (and at exit)

The process imports agentrl, not the parent's main script, and builds its own `ChatRenderer` from a pickled copy of the same tokenizer and the
same chat-template kwargs (so it renders and tokenizes exactly as the engine does), and
answers each check with the `CheckResult` that `run_check` gives in the engine: the loop only
pickles the request's `CheckInput` (messages, ids, pieces) and reads back a few bytes. If the
process cannot start or dies (killed, out of memory), or a check fails there for any other
reason, the check runs inline instead, with a warning: a trajectory is never lost, and an
error the check itself raises is raised as the inline check raises it.

`should_offload` decides per batch: `true` always, `false` never, `auto` when the batch has
at least `AUTO_MIN_REQUESTS` requests or the process runs already. Starting it costs a few
seconds of another core (spawning an interpreter and importing transformers), during which
the first finished requests wait for it; a batch of a few hundred multi-turn requests spends
more than that on its checks.
"""

from __future__ import annotations

import asyncio
import importlib.machinery
import logging
import multiprocessing
import pickle
import sys
import weakref
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.token_check import CheckInput, CheckResult, run_check

logger = logging.getLogger(__name__)

OFFLOAD_SETTINGS = ("auto", True, False)
AUTO_MIN_REQUESTS = 256  # auto: batches at least this large start the process

_renderer: ChatRenderer | None = None  # the worker process's own


def _start_worker(tokenizer_bytes: bytes, chat_template_kwargs: dict[str, Any]) -> None:
    """The worker's initializer: its renderer, from the engine's tokenizer and kwargs."""
    global _renderer
    _renderer = ChatRenderer(pickle.loads(tokenizer_bytes), chat_template_kwargs)


def _ping() -> bool:
    return True


def _run(payload: bytes) -> CheckResult:
    """A check in the worker: `payload` is a pickled CheckInput."""
    return run_check(_renderer, pickle.loads(payload))


@contextmanager
def _main_not_rerun() -> Iterator[None]:
    """Spawn a process that does not import the parent's `__main__` again: a spawned child
    re-runs the main script's (or `-m` module's) top-level code, which a training script
    without an `if __name__ == "__main__":` guard would turn into a second training run.
    A main module named `__main__` is the one the child skips (multiprocessing.spawn)."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = getattr(main, "__spec__", None)
    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = saved


def check_offload_setting(value: Any) -> str | bool:
    """`value` (multi_turn.tokenization_sanity_check_offload) if valid; an error otherwise."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    if value not in OFFLOAD_SETTINGS or (value in (0, 1) and not isinstance(value, bool)):
        raise ValueError(
            f"multi_turn.tokenization_sanity_check_offload is {value!r}; choose auto, true or "
            "false"
        )
    return value


def should_offload(setting: str | bool, requests: int, running: bool = False) -> bool:
    """Whether a batch of `requests` checks off the loop (module docstring)."""
    if setting == "auto":
        return running or requests >= AUTO_MIN_REQUESTS
    return bool(setting)


class CheckOffload:
    """One worker process for the checks of one engine (module docstring).

    Args:
        tokenizer: the engine's tokenizer (pickled once, for the worker's renderer).
        chat_template_kwargs: the engine's renderer's kwargs.
    """

    def __init__(self, tokenizer: Any, chat_template_kwargs: Mapping[str, Any] | None = None):
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        self._pool: ProcessPoolExecutor | None = None
        self._closer: weakref.finalize | None = None
        self._failed_start = False

    @property
    def running(self) -> bool:
        return self._pool is not None

    def start(self) -> bool:
        """Start the worker process (once; it keeps running between batches); whether it is
        running. A tokenizer that cannot be pickled keeps every check inline."""
        if self._pool is not None:
            return True
        if self._failed_start:
            return False
        try:
            tokenizer_bytes = pickle.dumps(self.tokenizer, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:  # a tokenizer object that cannot travel
            self._failed_start = True
            logger.warning("tokenization check stays on the event loop: the tokenizer cannot "
                           "be pickled for its process (%s: %s)", type(err).__name__, err)
            return False
        pool = ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),  # the engine's threads: no fork
            initializer=_start_worker,
            initargs=(tokenizer_bytes, self.kwargs),
        )
        with _main_not_rerun():  # the process is spawned here, in `submit`
            pool.submit(_ping)  # now: the process starts while the batch generates
        self._pool = pool
        self._closer = weakref.finalize(self, pool.shutdown, wait=False, cancel_futures=True)
        return True

    async def check(self, item: CheckInput, renderer: ChatRenderer) -> CheckResult:
        """`run_check(renderer, item)`, in the worker when it runs, else here."""
        pool = self._pool
        if pool is not None:
            try:
                payload = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
                return await asyncio.get_running_loop().run_in_executor(pool, _run, payload)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                broken = isinstance(err, BrokenProcessPool)
                logger.warning(
                    "request %s: the tokenization check failed in its process (%s: %s); "
                    "checking on the event loop%s", item.request_id, type(err).__name__, err,
                    " (the process is gone: the next batch starts a new one)" if broken else "")
                if broken and self._pool is pool:
                    self.close()
        return run_check(renderer, item)

    def close(self) -> None:
        """Stop the worker process (a later `start` begins a new one)."""
        pool, self._pool = self._pool, None
        if self._closer is not None:
            self._closer.detach()
            self._closer = None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
