"""The tokenization check's worker process and the pipe to it (check_offload.py drives it).

    process, conn = spawn_worker(tokenizer_bytes, chat_template_kwargs)   # returns at once
    conn.send_bytes(pickle.dumps([item, ...]))      # a call: a list of CheckInputs
    kind, results = pickle.loads(await receive(conn))   # ("results", [CheckResult | None])
    stop(process, conn)                             # the worker ends at the pipe's end of file

The worker (`worker_main`) builds its own `ChatRenderer` from a pickled copy of the engine's
tokenizer and chat-template kwargs, says `("ready", None)` (or `("failed", why)`), then
answers each call with `run_check`'s results, None for a check that raised there (the
engine runs that one again inline, where it raises as it always did). It is spawned, not
forked (the engine has threads), without importing the parent's main script again
(`main_not_rerun`). The loop reads the answers itself (`receive`: no helper thread).
"""

from __future__ import annotations

import asyncio
import importlib.machinery
import logging
import multiprocessing
import os
import pickle
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.token_check import CheckInput, CheckResult, run_check

logger = logging.getLogger(__name__)

DEFAULT_SEND_ROOM = 32 * 1024  # when the pipe's buffer cannot be read


def spawn_worker(tokenizer_bytes: bytes, chat_template_kwargs: dict) -> tuple[Any, Any]:
    """Start the worker process (it starts while the caller goes on); the process and the
    caller's end of the pipe."""
    context = multiprocessing.get_context("spawn")  # the engine's threads: no fork
    conn, child = context.Pipe(duplex=True)
    process = context.Process(target=worker_main,
                              args=(child, tokenizer_bytes, chat_template_kwargs),
                              name="agentrl-token-check", daemon=True)  # fmt: skip
    with main_not_rerun():
        process.start()  # returns at once: the worker starts while the batch generates
    child.close()
    return process, conn


def _run_all(renderer: ChatRenderer, items: list[CheckInput]) -> list[CheckResult | None]:
    """The worker's checks; None for one that raised (the engine runs it again inline, where
    it raises as it always did)."""
    results: list[CheckResult | None] = []
    for item in items:
        try:
            results.append(run_check(renderer, item))
        except Exception:
            logger.debug("request %s: the check raised in the worker", item.request_id,
                         exc_info=True)  # fmt: skip
            results.append(None)
    return results


def _send(conn: Any, message: tuple[str, Any]) -> bool:
    """Send ``message`` to the engine; False when the engine has closed its end (it stopped
    before this answer: nothing is waiting for it)."""
    try:
        conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError:  # BrokenPipeError, ConnectionResetError
        return False
    return True


def worker_main(conn: Any, tokenizer_bytes: bytes, chat_template_kwargs: dict) -> None:
    """The worker process: its renderer, then one answer per call until the pipe closes
    (an engine that stops before the worker is ready closes it first: the worker ends)."""
    try:
        renderer = ChatRenderer(pickle.loads(tokenizer_bytes), chat_template_kwargs)
    except Exception as err:
        _send(conn, ("failed", f"{type(err).__name__}: {err}"))
        return
    if not _send(conn, ("ready", None)):
        return
    while True:
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not _send(conn, ("results", _run_all(renderer, pickle.loads(payload)))):
            return


def stop(process: Any, conn: Any) -> None:
    """Close the pipe (the worker's end of file: it exits), then make sure it did."""
    with suppress(OSError):
        conn.close()
    process.join(timeout=2)
    if process.is_alive():
        process.kill()
        process.join(timeout=2)


@contextmanager
def main_not_rerun() -> Iterator[None]:
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


def send_room(conn: Any) -> int:
    """Bytes a call may have while another is in flight without blocking the sender: half
    the pipe's send buffer (a duplex `Pipe` is a socket pair)."""
    try:
        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2
    except OSError:
        return DEFAULT_SEND_ROOM


async def receive(conn: Any) -> bytes:
    """The next message on `conn`, read by the running loop when the pipe is readable."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    fd = conn.fileno()

    def readable() -> None:
        loop.remove_reader(fd)
        if not future.done():
            try:
                future.set_result(conn.recv_bytes())
            except Exception as err:  # EOFError: the worker is gone
                future.set_exception(err)

    loop.add_reader(fd, readable)
    try:
        return await future
    finally:
        loop.remove_reader(fd)
