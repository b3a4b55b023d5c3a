"""A step's timeline: spans on named tracks, written as a Chrome / Perfetto trace.

    recorder = TraceRecorder("rollout")                 # one per owner: a step, a batch call
    track = recorder.track("request 3a9c-0-1")          # one row of the timeline
    with track.span("generate", prompt_tokens=40) as args:
        ...; args["server"] = url                       # results go into the span's args
    track.complete("request", started, ended)           # from time.perf_counter() readings
    events = recorder.drain()                           # handed to whoever writes the trace
    write_chrome_trace(path, events, step=3)            # {"traceEvents": [...]} (JSON)

An event is a plain tuple ``(process, track, name, ts_us, dur_us, args)``, cheap to record
and to send between processes. ``process`` is the recorder's label with its pid
(``"rollout (pid 4242)"``): worker processes, Ray actors and the driver each record their
own and the events meet in the driver's file (`chrome_trace` numbers processes and tracks and
names them with ``"M"`` metadata events; every span is an ``"X"`` complete event).

One clock: timestamps are wall-clock microseconds, taken as ``time.perf_counter()`` anchored
once per process to ``time.time_ns()``, so the events of every process on a machine line up
while each process's own spans stay monotonic (they nest exactly as they ran).

Carried over worker calls: a call whose batch ``meta_info`` holds ``TRACE_FLAG`` records
(`TraceRecorder.for_call`) and returns its events in ``meta_info[TRACE_EVENTS]``; a worker
group concatenates the events of its ranks (agentrl/distributed/dispatch.py).

Off costs nothing but a ``None`` check: code holds ``None`` instead of a recorder or a track,
and `span` then returns one shared null context.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

TRACE_FLAG = "trace"  # meta_info key: record this call's events
TRACE_EVENTS = "trace_events"  # meta_info key: the events a call recorded

# (process, track, name, ts_us, dur_us, args)
Event = tuple[str, str, str, int, int, dict[str, Any]]

# the anchor of this process's clock: perf_counter seconds -> wall-clock microseconds
_WALL_US = time.time_ns() / 1000.0
_PERF_S = time.perf_counter()
_NULL = contextlib.nullcontext()


def wall_us(perf_s: float) -> int:
    """The wall-clock microsecond of a ``time.perf_counter()`` reading of this process."""
    return round(_WALL_US + (perf_s - _PERF_S) * 1e6)


class TraceRecorder:
    """Collects the finished spans of one owner (a step, a batch call, a producer)."""

    def __init__(self, process: str) -> None:
        self.process = f"{process} (pid {os.getpid()})"
        self.events: list[Event] = []

    @classmethod
    def for_call(cls, meta_info: Mapping[str, Any], process: str) -> TraceRecorder | None:
        """A recorder when the call's batch asks for one (``meta_info[TRACE_FLAG]``)."""
        return cls(process) if meta_info.get(TRACE_FLAG) else None

    def track(self, name: str) -> Track:
        return Track(self, name)

    def complete(self, track: str, name: str, started: float, ended: float,
                 args: dict[str, Any] | None = None) -> None:  # fmt: skip
        """A span from two ``time.perf_counter()`` readings."""
        ts = round(_WALL_US + (started - _PERF_S) * 1e6)  # wall_us, inlined: once per span
        dur = round(_WALL_US + (ended - _PERF_S) * 1e6) - ts
        self.events.append((self.process, track, name, ts, dur, args or {}))

    def extend(self, events: Iterable[Event]) -> None:
        """Add events recorded elsewhere (another process's, a worker call's)."""
        # tuples may arrive as JSON lists
        self.events.extend(e if type(e) is tuple else tuple(e) for e in events)

    def drain(self) -> list[Event]:
        """The events so far, handed over (the recorder starts empty again)."""
        events, self.events = self.events, []
        return events


class Track:
    """One row of the timeline: a recorder and a track name."""

    __slots__ = ("name", "recorder")

    def __init__(self, recorder: TraceRecorder, name: str) -> None:
        self.recorder, self.name = recorder, name

    def lane(self, index: int) -> Track:
        """A row beside this one for concurrent spans (spans on one row must nest):
        lane 0 is this track, lane k > 0 is ``"{name} call {k}"``."""
        return self if index == 0 else Track(self.recorder, f"{self.name} call {index}")

    def complete(self, name: str, started: float, ended: float,
                 args: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.recorder.complete(self.name, name, started, ended, args)

    def span(self, name: str, **args: Any) -> Span:
        """Time the block; its ``as`` value is the span's args dict (results go in it). An
        exception is recorded as ``args["error"]`` and raised on."""
        return Span(self, name, args)


class Span:
    """`Track.span`'s context manager: a plain class, not a generator one (contextlib's
    costs a generator and its frame per span, on the rollout's event loop)."""

    __slots__ = ("args", "name", "started", "track")

    def __init__(self, track: Track, name: str, args: dict[str, Any]) -> None:
        self.track, self.name, self.args = track, name, args
        self.started = 0.0

    def __enter__(self) -> dict[str, Any]:
        self.started = time.perf_counter()
        return self.args

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> bool:
        ended = time.perf_counter()
        if exc_type is not None:
            self.args["error"] = exc_type.__name__
        track = self.track
        track.recorder.complete(track.name, self.name, self.started, ended, self.args)
        return False  # an exception goes on


def span(track: Track | None, name: str, **args: Any) -> contextlib.AbstractContextManager:
    """``track.span(name, **args)``, or a null context (yielding None) when ``track`` is
    None: the one check the code pays when tracing is off."""
    return _NULL if track is None else Span(track, name, args)


def chrome_trace(events: Iterable[Event], **other: Any) -> dict[str, Any]:
    """The Chrome Trace Event Format of ``events`` (what ui.perfetto.dev and
    chrome://tracing open): ``"X"`` events sorted by start, a pid per process and a tid per
    track numbered in order of first appearance, ``"M"`` events naming both; ``other`` goes
    to ``otherData``."""
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    spans = []
    for process, track, name, ts, dur, args in sorted(events, key=lambda e: (e[3], -e[4])):
        pid = pids.setdefault(process, len(pids) + 1)
        tid = tids.setdefault((process, track), len(tids) + 1)
        spans.append({"name": name, "cat": "agentrl", "ph": "X", "ts": ts, "dur": dur,
                      "pid": pid, "tid": tid, "args": args})  # fmt: skip
    meta: list[dict[str, Any]] = []
    for process, pid in pids.items():
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                     "args": {"name": process}})  # fmt: skip
        meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                     "args": {"sort_index": pid}})  # fmt: skip
    for (process, track), tid in tids.items():
        pid = pids[process]
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                     "args": {"name": track}})  # fmt: skip
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                     "args": {"sort_index": tid}})  # fmt: skip
    return {"traceEvents": meta + spans, "displayTimeUnit": "ms", "otherData": other}


def write_chrome_trace(path: Path, events: Iterable[Event], **other: Any) -> Path:
    """Write `chrome_trace` as JSON to ``path`` (atomically: a reader never sees half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(chrome_trace(events, **other), default=str), encoding="utf-8")
    os.replace(partial, path)
    return path


__all__ = [
    "TRACE_EVENTS",
    "TRACE_FLAG",
    "Event",
    "Span",
    "TraceRecorder",
    "Track",
    "chrome_trace",
    "span",
    "wall_us",
    "write_chrome_trace",
]
