"""Hang watchdog: say where a run is stuck when a stage stops making progress.

Runs sometimes hang for hours with nothing saying where (a tool call that never returns, a
collective waiting on a dead rank, a rollout buffer that never fills). The trainer wraps each
stage (generation, tool call, reward, actor update, weight sync, worker call, buffer wait) in
``Watchdog.stage`` and calls ``beat`` on progress. When the innermost stage of a thread (or
asyncio task) goes ``trainer.watchdog_s`` seconds without progress, the watchdog thread logs
ONE error record (logger ``agentrl.trainer.watchdog``) that starts with

    stage 'generation' (step 3) made no progress for 12.3 s (trainer.watchdog_s=10)

then the Python stack of every thread and of every task of the registered event loops. Each
stage entry is reported once; a ``beat`` re-arms it. ``on_hang`` then gets the
``HangReport`` (the trainer uses it to stop with a checkpoint). Timeout None or <= 0: off.

    with Watchdog(cfg.trainer.watchdog_s, on_hang=request_stop) as watchdog:
        watchdog.register_loop(engine_loop, "rollout")
        with watchdog.stage("update_actor", detail=f"step {step}"):
            watchdog.beat("update_actor")  # after each micro-batch

Stages are tracked per owner: the asyncio task when entered inside one, else the thread, so
concurrent coroutines on one loop thread do not nest into each other's stages.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

_ALL_TASKS_TRIES = 5
_MAX_AWAIT_DEPTH = 100


@dataclass(frozen=True)
class HangReport:
    """One stage entry that went ``stalled_s`` seconds without progress."""

    stage: str
    detail: str
    stalled_s: float
    thread_name: str  # the thread that entered the stage
    outer_stages: tuple[str, ...]
    text: str  # the full report that was logged


class StageHangError(RuntimeError):
    """Raised in the trainer's main thread when ``trainer.watchdog_action`` is ``stop``."""

    def __init__(self, report: HangReport) -> None:
        super().__init__(f"stage {report.stage!r} made no progress for "
                         f"{report.stalled_s:.1f} s (trainer.watchdog_s)")
        self.report = report


@dataclass
class _Entry:
    """One active stage of one owner; mutated only under ``Watchdog._lock``."""

    name: str
    detail: str
    thread_name: str
    task_name: str  # "" outside asyncio tasks
    last_progress: float
    reported: bool = False


def format_thread_stacks() -> str:
    """The current Python stack of every thread of the process, named."""
    names = {t.ident: t for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        thread = names.get(ident)
        name = thread.name if thread is not None else "<unknown>"
        daemon = " daemon" if thread is not None and thread.daemon else ""
        stack = "".join(traceback.format_stack(frame))
        parts.append(f"Thread {name!r} (id {ident}{daemon}):\n{stack}")
    return "\n".join(parts)


def _await_chain(coro: Any) -> list[FrameType]:
    """Frames of a suspended coroutine and of everything it awaits, outermost first.

    ``Task.get_stack`` returns only the task's own coroutine frame; the frame that actually
    waits is usually a few awaits deeper, so follow ``cr_await`` down to the future.
    """
    frames: list[FrameType] = []
    while coro is not None and len(frames) < _MAX_AWAIT_DEPTH:
        frame = next((getattr(coro, a) for a in ("cr_frame", "gi_frame", "ag_frame")
                      if getattr(coro, a, None) is not None), None)
        if frame is not None:
            frames.append(frame)
        coro = next((getattr(coro, a) for a in ("cr_await", "gi_yieldfrom", "ag_await")
                     if getattr(coro, a, None) is not None), None)
    return frames


def _all_tasks(loop: asyncio.AbstractEventLoop) -> set[asyncio.Task[Any]]:
    """``asyncio.all_tasks`` from another thread: the set may change while it is copied."""
    for _ in range(_ALL_TASKS_TRIES - 1):
        with contextlib.suppress(RuntimeError):
            return asyncio.all_tasks(loop)
    return asyncio.all_tasks(loop)


def _format_task(task: asyncio.Task[Any]) -> str:
    coro = task.get_coro()
    qualname = getattr(coro, "__qualname__", repr(coro))
    state = "cancelled" if task.cancelled() else "done" if task.done() else "pending"
    frames = _await_chain(coro) or task.get_stack()
    stack = traceback.StackSummary.extract((f, f.f_lineno) for f in frames).format()
    return f"Task {task.get_name()!r} coro={qualname} ({state}):\n" + "".join(stack)


def format_task_stacks(loops: Mapping[str, asyncio.AbstractEventLoop]) -> str:
    """The stack of every asyncio task of each named loop (the loops may run elsewhere)."""
    out = io.StringIO()
    for loop_name, loop in loops.items():
        if loop.is_closed():
            out.write(f"Event loop {loop_name!r}: closed\n")
            continue
        try:
            tasks = _all_tasks(loop)
        except RuntimeError as exc:
            out.write(f"Event loop {loop_name!r}: could not list tasks ({exc})\n")
            continue
        out.write(f"Event loop {loop_name!r}: {len(tasks)} task(s)\n")
        for task in sorted(tasks, key=lambda t: t.get_name()):
            out.write(_format_task(task) + "\n")
    return out.getvalue()


def _owner() -> tuple[tuple[int, int], str, str]:
    """Who enters a stage: (key, thread name, task name); the task is "" outside one."""
    thread = threading.current_thread()
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop in this thread
        task = None
    if task is None:
        return (thread.ident or 0, 0), thread.name, ""
    return (thread.ident or 0, id(task)), thread.name, task.get_name()


class Watchdog:
    """Reports stages that make no progress for ``timeout_s`` seconds; see the module doc."""

    def __init__(self, timeout_s: float | None, *,
                 on_hang: Callable[[HangReport], None] | None = None,
                 poll_s: float | None = None) -> None:
        self.timeout_s = timeout_s if timeout_s is not None and timeout_s > 0 else None
        self.poll_s = poll_s or (min(1.0, self.timeout_s / 4) if self.timeout_s else 1.0)
        self._on_hang = on_hang
        self._lock = threading.Lock()
        self._stacks: dict[tuple[int, int], list[_Entry]] = {}
        self._loops: dict[str, asyncio.AbstractEventLoop] = {}
        self._sources: dict[str, Callable[[], str]] = {}
        self._hangs: list[HangReport] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.timeout_s is not None

    @property
    def hangs(self) -> list[HangReport]:
        with self._lock:
            return list(self._hangs)

    def start(self) -> None:
        if not self.enabled or (self._thread is not None and self._thread.is_alive()):
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agentrl-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None

    def __enter__(self) -> Watchdog:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def register_loop(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        with self._lock:
            self._loops[name] = loop

    def register_source(self, name: str, stacks: Callable[[], str]) -> None:
        """Another process's stacks for the reports (``stacks()`` returns them as text; the
        off-policy rollout's process). Its failure is noted in the report, never raised."""
        with self._lock:
            self._sources[name] = stacks

    def unregister_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._loops = {n: lp for n, lp in self._loops.items() if lp is not loop}

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        """Mark ``name`` active for the current thread (or task) while the block runs."""
        if not self.enabled:
            yield
            return
        key, thread_name, task_name = _owner()
        entry = _Entry(name, detail, thread_name, task_name, time.monotonic())
        with self._lock:
            self._stacks.setdefault(key, []).append(entry)
        try:
            yield
        finally:
            with self._lock:
                stack = self._stacks[key]
                stack.remove(entry)
                if stack:  # an inner stage finishing is progress of the enclosing one
                    stack[-1].last_progress, stack[-1].reported = time.monotonic(), False
                else:
                    del self._stacks[key]

    def beat(self, name: str | None = None) -> None:
        """Progress: reset the clock of the active stages named ``name`` (all when None).

        Only the innermost stage of each owner is watched, so a beat of an outer stage does
        not clear a stall of the stage nested in it.
        """
        if not self.enabled:
            return
        now = time.monotonic()
        with self._lock:
            for stack in self._stacks.values():
                for entry in stack:
                    if name is None or entry.name == name:
                        entry.last_progress = now
                        entry.reported = False

    def _overdue(self) -> list[tuple[_Entry, tuple[str, ...], float]]:
        """The innermost stage of each owner that is past the timeout and not yet reported."""
        assert self.timeout_s is not None
        now, found = time.monotonic(), []
        with self._lock:
            for stack in self._stacks.values():
                entry = stack[-1]
                stalled = now - entry.last_progress
                if not entry.reported and stalled > self.timeout_s:
                    entry.reported = True
                    found.append((entry, tuple(e.name for e in stack[:-1]), stalled))
        return found

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._check()
            except Exception:  # the watchdog must outlive anything it observes
                logger.exception("watchdog check failed")

    def _check(self) -> None:
        overdue = self._overdue()
        if not overdue:
            return
        with self._lock:
            loops, sources = dict(self._loops), dict(self._sources)
        stacks = (f"Python stacks of all threads:\n{format_thread_stacks()}\n"
                  f"asyncio tasks of registered loops:\n{format_task_stacks(loops) or '(none)'}")
        for name, source in sources.items():
            try:
                stacks += f"\nprocess {name!r}:\n{source()}"
            except Exception as err:  # a dead or stuck process: say so, keep reporting
                stacks += f"\nprocess {name!r}: stacks unavailable ({err!r})"
        for entry, outer, stalled in overdue:
            report = self._report(entry, outer, stalled, stacks)
            logger.error("%s", report.text)
            with self._lock:
                self._hangs.append(report)
            if self._on_hang is not None:
                try:
                    self._on_hang(report)
                except Exception:
                    logger.exception("watchdog on_hang callback failed for stage %r", entry.name)

    def _report(self, entry: _Entry, outer: tuple[str, ...], stalled: float,
                stacks: str) -> HangReport:
        detail = f" ({entry.detail})" if entry.detail else ""
        head = (f"stage {entry.name!r}{detail} made no progress for {stalled:.1f} s "
                f"(trainer.watchdog_s={self.timeout_s:g})\n"
                f"entered by thread {entry.thread_name!r}"
                + (f" in task {entry.task_name!r}" if entry.task_name else "")
                + (f" inside {' > '.join(repr(s) for s in outer)}" if outer else "") + "\n")
        return HangReport(stage=entry.name, detail=entry.detail, stalled_s=stalled,
                          thread_name=entry.thread_name, outer_stages=outer,
                          text=head + stacks)
