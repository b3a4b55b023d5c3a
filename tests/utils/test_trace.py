"""The timeline recorder: spans on tracks from perf_counter readings on the wall clock, the
Chrome trace they become (processes, tracks, metadata), and nothing when off."""

from __future__ import annotations

import json
import os
import time

import pytest

from agentrl.utils.trace import (
    TRACE_FLAG,
    TraceRecorder,
    chrome_trace,
    span,
    wall_us,
    write_chrome_trace,
)


def test_the_clock_is_the_wall_clock_in_microseconds_and_follows_perf_counter():
    before = time.time_ns() // 1000
    now = wall_us(time.perf_counter())
    after = time.time_ns() // 1000
    assert before - 1000 <= now <= after + 1000  # the anchor: a few µs between the two reads
    assert wall_us(10.5) - wall_us(10.0) == 500_000  # seconds -> µs, exactly


def test_spans_record_their_interval_args_and_errors_on_their_track():
    recorder = TraceRecorder("rollout")
    assert recorder.process == f"rollout (pid {os.getpid()})"
    track = recorder.track("request r1")
    started = time.perf_counter()
    with track.span("RUNNING"), track.span("generate", prompt_tokens=3) as args:
        args["output_tokens"] = 7
    with pytest.raises(ValueError), track.span("tool", tool="calc"):
        raise ValueError("boom")
    ended = time.perf_counter()
    events = recorder.drain()
    assert recorder.events == [] and recorder.drain() == []
    assert [(e[1], e[2]) for e in events] == [
        ("request r1", "generate"), ("request r1", "RUNNING"), ("request r1", "tool")]
    generate, running, tool = events
    assert generate[5] == {"prompt_tokens": 3, "output_tokens": 7}
    assert tool[5] == {"tool": "calc", "error": "ValueError"}
    # the inner span lies within the outer, all within the readings around them
    assert running[3] <= generate[3] and generate[3] + generate[4] <= running[3] + running[4]
    assert wall_us(started) <= running[3] and tool[3] + tool[4] <= wall_us(ended)


def test_lanes_hold_concurrent_spans_beside_the_track():
    track = TraceRecorder("rollout").track("request r1")
    assert track.lane(0) is track
    assert track.lane(2).name == "request r1 call 2" and track.lane(2).recorder is track.recorder


def test_off_is_a_null_context_and_no_recorder():
    with span(None, "generate", prompt_tokens=3) as args:
        assert args is None
    assert TraceRecorder.for_call({}, "worker") is None
    assert TraceRecorder.for_call({TRACE_FLAG: False}, "worker") is None
    assert TraceRecorder.for_call({TRACE_FLAG: True}, "worker").process.startswith("worker")


def test_a_chrome_trace_numbers_processes_and_tracks_and_names_them():
    events = [
        ("rollout (pid 7)", "request b", "request", 300, 50, {}),
        ("trainer (pid 1)", "stages", "step", 100, 1000, {"step": 2}),
        ("rollout (pid 7)", "request a", "request", 200, 90, {"state": "COMPLETED"}),
        ["trainer (pid 1)", "stages", "gen", 100, 400, {}],  # as a JSON round trip gives it
    ]
    trace = chrome_trace(events, step=2)
    assert trace["otherData"] == {"step": 2} and trace["displayTimeUnit"] == "ms"
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    # by start, the longer first at a tie (a parent before its child)
    assert [e["name"] for e in spans] == ["step", "gen", "request", "request"]
    assert [(e["pid"], e["tid"]) for e in spans] == [(1, 1), (1, 1), (2, 2), (2, 3)]
    assert spans[0] == {"name": "step", "cat": "agentrl", "ph": "X", "ts": 100,
                        "dur": 1000, "pid": 1, "tid": 1, "args": {"step": 2}}  # fmt: skip
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in trace["traceEvents"]
            if e["ph"] == "M"}  # fmt: skip
    assert meta[("process_name", 1, 0)] == {"name": "trainer (pid 1)"}
    assert meta[("process_name", 2, 0)] == {"name": "rollout (pid 7)"}
    assert meta[("thread_name", 2, 2)] == {"name": "request a"}
    assert meta[("thread_name", 2, 3)] == {"name": "request b"}
    assert meta[("thread_sort_index", 2, 3)] == {"sort_index": 3}


def test_the_file_is_written_whole_and_reads_back(tmp_path):
    recorder = TraceRecorder("trainer")
    recorder.complete("stages", "gen", 1.0, 1.25, {"n": 4})
    path = write_chrome_trace(tmp_path / "trace" / "step_3.json", recorder.drain(), step=3)
    assert [p.name for p in path.parent.iterdir()] == ["step_3.json"]  # no partial left
    trace = json.loads(path.read_text())
    (gen,) = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert gen["dur"] == 250_000 and gen["args"] == {"n": 4}


def test_span_of_a_track_records_its_args_and_any_base_exception():
    recorder = TraceRecorder("rollout")
    track = recorder.track("request r2")
    with span(track, "generate", prompt_tokens=5) as args:
        args["output_tokens"] = 2
    with pytest.raises(KeyboardInterrupt), span(track, "tool"):
        raise KeyboardInterrupt  # a BaseException is recorded too, and goes on
    (generate, tool) = recorder.drain()
    assert generate[1:3] == ("request r2", "generate") and generate[4] >= 0
    assert generate[5] == {"prompt_tokens": 5, "output_tokens": 2}
    assert tool[2] == "tool" and tool[5] == {"error": "KeyboardInterrupt"}
