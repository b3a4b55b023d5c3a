"""The tokenization sanity check off the engine's event loop, in one worker process.

The check of a finished trajectory (agentrl/rollout/token_check.py: a template render of the
whole conversation, a decode, an encode, one more render per structured assistant turn)
is a large share of the loop's CPU per request, and it is mostly jinja in Python: a thread
would hold the interpreter lock just the same. So the engine can hand it to one long-lived
process (`multi_turn.tokenization_sanity_check_offload`):

    offload = CheckOffload(tokenizer, chat_template_kwargs)
    offload.start()                                  # spawns the process, returns at once
    result = await offload.check(item, renderer)     # a CheckResult, as run_check's
    offload.close()                                  # with the engine (and at exit)

The process (agentrl/rollout/check_process.py: its main, its start and stop, the pipe's
reads) imports agentrl, not the parent's main script, and builds its own
`ChatRenderer` from a pickled copy of the same tokenizer and the same chat-template kwargs
(so it renders and tokenizes exactly as the engine does); it answers with the
`CheckResult`s that `run_check` gives in the engine. The loop talks to it over a pipe it
reads itself (no helper thread: with a busy loop, every hand-over of the interpreter lock to
a thread costs up to its switch interval, 5 ms): checks wait in a queue and go to the
worker `CHUNK` at a time, `IN_FLIGHT` calls at once. A check runs on the loop instead while
the worker is starting. In a batch (`engine._rollout`) a finished request's check queues
while other requests of the batch still run (`hold`: they decide the batch's end, and the
loop is theirs); when the last one arrives, the loop takes the checks not yet sent, newest
first, while the worker answers its calls (`steal`: both cores check at the end). For an
open-ended stream of requests (the async producer's), a check queues only when the worker
would answer it within `MAX_WAIT_S` at its pace in its last call (a worker short of CPU must
not hold finished requests), else it runs on the loop. If the process cannot start or dies (killed, out of
memory), or a check fails there for any other reason, the check runs on the loop, with a
warning: a trajectory is never lost, and an error the check itself raises is raised as the
inline check raises it.

`should_offload` decides per batch: `true` always, `false` never, `auto` when the batch has
at least `AUTO_MIN_REQUESTS` requests or the process runs already (starting it costs the
loop a pickle of the tokenizer and another core a few seconds).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import pickle
import time
import weakref
from collections.abc import Mapping
from typing import Any

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.check_process import (
    DEFAULT_SEND_ROOM,
    receive,
    send_room,
    spawn_worker,
    stop,
)
from agentrl.rollout.token_check import CheckInput, CheckResult, run_check

logger = logging.getLogger(__name__)

OFFLOAD_SETTINGS = ("auto", True, False)
AUTO_MIN_REQUESTS = 256  # auto: batches at least this large start the process
# how long a finished request may wait for the worker (its queue, at the worker's measured
# pace per check); checks beyond that run on the loop: a worker that falls behind (a busy
# machine) would hold finished requests, and the batch's last ones decide its end
MAX_WAIT_S = 0.25
# checks per call to the worker, and calls at a time: small calls leave the checks that have
# not been sent for the loop to take at the batch's end (`steal`); two in flight keep the
# worker busy while the loop reads an answer
CHUNK = 16
IN_FLIGHT = 2
_FIRST_PACE_S = 0.002  # seconds per check assumed until the worker has answered once


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
        self._process: Any = None
        self._conn: Any = None
        self._ready = False  # the worker said it has built its renderer
        self._closer: weakref.finalize | None = None
        self._failed_start = False
        # checks waiting for the worker (while it runs the previous ones), and their sender
        # (a deque: a call takes CHUNK from the front, `steal` from the back, each in
        # O(1) per check however many queue; a list's slices copied the whole queue per call)
        self._waiting: collections.deque[tuple[CheckInput, asyncio.Future]] = collections.deque()
        self._sender: asyncio.Future | None = None
        self._stealer: asyncio.Future | None = None  # `steal`'s task
        self._in_worker = 0  # checks sent to the worker or held back for it, not answered yet
        self._pace_s = _FIRST_PACE_S  # the worker's seconds per check, in its last call
        self._send_room = DEFAULT_SEND_ROOM  # bytes a call may have beside one in flight
        self.answered = 0  # checks the worker answered (the rest ran on the loop)

    @property
    def running(self) -> bool:
        return self._process is not None

    def start(self) -> bool:
        """Start the worker process (once; it keeps running between batches); whether it is
        running. A tokenizer that cannot be pickled keeps every check inline."""
        if self._process is not None:
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
        # the process starts while the batch generates (check_process.py)
        process, conn = spawn_worker(tokenizer_bytes, self.kwargs)
        self._process, self._conn, self._ready = process, conn, False
        self._send_room = send_room(conn)
        self._closer = weakref.finalize(self, stop, process, conn)  # at exit too
        return True

    def wait_ready(self, timeout: float) -> bool:
        """Block until the worker has started (or `timeout` s passed); whether it has."""
        deadline = time.monotonic() + timeout
        while self._conn is not None and not self._is_ready():
            if time.monotonic() > deadline:
                return False
            self._conn.poll(0.05)
        return self._ready

    def _is_ready(self) -> bool:
        """Whether the worker has started (reads its first message when there is one)."""
        if self._ready or self._conn is None:
            return self._ready
        try:
            if not self._conn.poll():
                return False
            kind, detail = pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError) as err:
            kind, detail = "failed", f"{type(err).__name__}: {err}"
        if kind != "ready":
            logger.warning("the tokenization check's process did not start (%s); checking on "
                           "the event loop", detail)
            self._failed_start = True
            self.close()
            return False
        self._ready = True
        return True

    async def check(self, item: CheckInput, renderer: ChatRenderer, hold: bool = False
                    ) -> CheckResult:  # fmt: skip
        """`run_check(renderer, item)`: in the worker when it has started and, unless `hold`,
        would answer within `MAX_WAIT_S` at its pace (or nothing waits for it); else here.
        `hold`: the caller's batch still has requests running, and it calls `steal` when the
        last of them waits here (a check may queue while the batch goes on)."""
        queued = len(self._waiting) + self._in_worker
        if self._is_ready() and (hold or queued == 0 or (queued + 1) * self._pace_s <= MAX_WAIT_S):
            future = asyncio.get_running_loop().create_future()
            self._waiting.append((item, future))
            if self._sender is None or self._sender.done():
                self._sender = asyncio.ensure_future(self._send())
            result = await future
            if result is not None:
                return result
        return run_check(renderer, item)

    def start_stealing(self, renderer: ChatRenderer) -> None:
        """`steal` in a task of the running loop (kept until it ends)."""
        if self._stealer is None or self._stealer.done():
            self._stealer = asyncio.ensure_future(self.steal(renderer))

    async def steal(self, renderer: ChatRenderer) -> None:
        """Run the checks still waiting for the worker here, newest first, while the worker
        runs its calls (the batch's last requests wait for them: both cores check)."""
        while self._waiting:
            item, future = self._waiting.pop()
            if future.done():
                continue
            try:
                result = run_check(renderer, item)
            except Exception:  # the request runs it again inline, where it raises
                result = None
            future.set_result(result)
            await asyncio.sleep(0)  # the worker's answers and the finished requests go on

    async def _send(self) -> None:
        """Hand the waiting checks to the worker, oldest first, at most `CHUNK` a call and
        `IN_FLIGHT` calls at a time (the worker starts the next call as it answers one),
        until none wait; a check the worker did not answer gets None (it then runs on the
        loop). A call too large for the pipe's buffer waits until the call in flight is
        answered: sending it then would block the loop until the worker reads it."""
        pending: collections.deque[list[tuple[CheckInput, asyncio.Future]]] = collections.deque()
        staged: tuple[list, bytes] | None = None  # the next call, held back (its size)
        conn = self._conn
        try:
            while self._waiting or pending or staged is not None:
                if staged is not None and not pending:
                    (batch, payload), staged = staged, None
                    pending.append(batch)
                    conn.send_bytes(payload)
                while staged is None and self._waiting and len(pending) < IN_FLIGHT:
                    batch = [self._waiting.popleft()
                             for _ in range(min(CHUNK, len(self._waiting)))]  # fmt: skip
                    self._in_worker += len(batch)
                    payload = pickle.dumps([item for item, _ in batch],
                                           protocol=pickle.HIGHEST_PROTOCOL)  # fmt: skip
                    if pending and len(payload) > self._send_room:
                        staged = (batch, payload)
                        break
                    pending.append(batch)  # before sending: a failed send answers it here
                    conn.send_bytes(payload)
                if not pending:  # the process was closed
                    raise RuntimeError("the process is closed")
                started = time.perf_counter()
                kind, results = pickle.loads(await receive(conn))
                batch = pending.popleft()
                self._in_worker -= len(batch)
                if kind != "results" or len(results) != len(batch):
                    raise RuntimeError(f"unexpected answer {kind!r}")
                self._pace_s = (time.perf_counter() - started) / len(batch)
                self.answered += sum(r is not None for r in results)
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        except asyncio.CancelledError:  # the loop is closing: the pipe is out of step
            self.close()
            for batch in [*pending, *([staged[0]] if staged else [])]:
                for _, future in batch:
                    future.cancel()
            raise
        except Exception as err:
            unanswered = [entry for batch in pending for entry in batch] + list(self._waiting)
            if staged is not None:
                unanswered += staged[0]
            self._waiting.clear()
            logger.warning(
                "the tokenization check of %d requests failed in its process (%s: %s); "
                "checking them on the event loop (the next batch starts a new process)",
                len(unanswered), type(err).__name__, err)  # fmt: skip
            self.close()
            for _, future in unanswered:
                if not future.done():
                    future.set_result(None)
        finally:
            self._in_worker = 0

    def close(self) -> None:
        """Stop the worker process (a later `start` begins a new one)."""
        process, conn = self._process, self._conn
        self._process, self._conn, self._ready = None, None, False
        if self._closer is not None:
            self._closer.detach()
            self._closer = None
        if process is not None:
            stop(process, conn)
