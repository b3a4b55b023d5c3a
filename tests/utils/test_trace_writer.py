"""The trace writer: files written on its thread in order, all of them by flush and close, a
failed file raised at the caller's next call, and submit waiting when too many are pending."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from agentrl.utils import trace_writer
from agentrl.utils.trace_writer import TraceWriteError, TraceWriter

EVENT = ("trainer (pid 1)", "stages", "step", 100, 50, {"step": 1})


def _x_events(path):
    return [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]


def test_submitted_files_are_all_written_by_close_as_valid_chrome_traces(tmp_path):
    writer = TraceWriter()
    for step in range(1, 6):
        writer.submit(tmp_path / f"step_{step}.json", [EVENT], step=step)
    writer.close()
    for step in range(1, 6):
        trace = json.loads((tmp_path / f"step_{step}.json").read_text())
        assert trace["otherData"] == {"step": step}
        assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"] == ["step"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"step_{s}.json" for s in range(1, 6)]
    writer.close()  # twice is fine
    with pytest.raises(RuntimeError, match="after close"):
        writer.submit(tmp_path / "late.json", [EVENT])


def test_submit_returns_before_the_file_is_written_and_flush_waits_for_it(tmp_path, monkeypatch):
    release = threading.Event()
    written = trace_writer.write_chrome_trace

    def slow_write(path, events, **other):
        release.wait(timeout=30)
        return written(path, events, **other)

    monkeypatch.setattr(trace_writer, "write_chrome_trace", slow_write)
    writer = TraceWriter()
    writer.submit(tmp_path / "step_1.json", [EVENT], step=1)
    assert not (tmp_path / "step_1.json").exists()  # the caller went on
    release.set()
    writer.flush()
    assert len(_x_events(tmp_path / "step_1.json")) == 1
    writer.close()


def test_submit_waits_when_max_pending_files_are_waiting(tmp_path, monkeypatch):
    release = threading.Event()
    started = threading.Semaphore(0)
    written = trace_writer.write_chrome_trace

    def slow_write(path, events, **other):
        started.release()
        release.wait(timeout=30)
        return written(path, events, **other)

    monkeypatch.setattr(trace_writer, "write_chrome_trace", slow_write)
    writer = TraceWriter(max_pending=1)
    writer.submit(tmp_path / "a.json", [EVENT])  # taken by the thread
    assert started.acquire(timeout=30)
    writer.submit(tmp_path / "b.json", [EVENT])  # waits in the queue
    third = threading.Thread(target=writer.submit, args=(tmp_path / "c.json", [EVENT]))
    third.start()
    third.join(timeout=0.2)
    assert third.is_alive()  # blocked: one file is already pending
    release.set()
    third.join(timeout=30)
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json", "c.json"]
    with pytest.raises(ValueError, match="max_pending"):
        TraceWriter(max_pending=0)


def test_a_failed_file_is_raised_at_the_next_call_naming_it(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the trace directory should be")
    writer = TraceWriter()
    writer.submit(blocker / "step_1.json", [EVENT], step=1)
    with pytest.raises(TraceWriteError, match="step_1.json could not be written") as err:
        writer.flush()
    assert isinstance(err.value.__cause__, OSError)
    writer.flush()  # raised once
    writer.submit(tmp_path / "step_2.json", [EVENT], step=2)  # the writer goes on
    writer.close()
    assert len(_x_events(tmp_path / "step_2.json")) == 1


def test_close_logs_a_failure_it_has_not_raised(tmp_path, caplog):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    writer = TraceWriter()
    writer.submit(blocker / "step_1.json", [EVENT])
    with caplog.at_level(logging.ERROR, logger="agentrl.utils.trace_writer"):
        writer.close()
    assert "step_1.json could not be written" in caplog.text
