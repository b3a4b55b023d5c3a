"""Hang watchdog (agentrl/trainer/watchdog.py): a stage without progress past the timeout is
reported once, with the stacks of every thread and of the asyncio tasks of registered loops."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from agentrl.trainer.watchdog import HangReport, Watchdog

TIMEOUT_S = 0.3


def _wait_for_hangs(watchdog: Watchdog, n: int, limit_s: float = 2.0) -> None:
    deadline = time.monotonic() + limit_s
    while len(watchdog.hangs) < n and time.monotonic() < deadline:
        time.sleep(0.02)


def stuck_in_reward_function(watchdog: Watchdog) -> None:
    """Sleeps (no beats) until the watchdog has reported, then a few polls more."""
    _wait_for_hangs(watchdog, 1)
    time.sleep(4 * watchdog.poll_s)


def test_a_stalled_stage_is_reported_once_with_the_sleeping_stack(caplog):
    with caplog.at_level(logging.ERROR, logger="agentrl.trainer.watchdog"), \
            Watchdog(TIMEOUT_S) as watchdog, watchdog.stage("reward", detail="step 3"):
        stuck_in_reward_function(watchdog)
    assert len(watchdog.hangs) == 1
    report = watchdog.hangs[0]
    assert (report.stage, report.detail, report.thread_name) == ("reward", "step 3", "MainThread")
    assert report.stalled_s > TIMEOUT_S
    assert report.text.startswith("stage 'reward' (step 3) made no progress for ")
    assert "(trainer.watchdog_s=0.3)" in report.text.splitlines()[0]
    assert "stuck_in_reward_function" in report.text
    records = [r for r in caplog.records if r.name == "agentrl.trainer.watchdog"]
    assert [r.levelno for r in records] == [logging.ERROR]
    assert records[0].getMessage() == report.text


def test_a_long_stage_that_beats_is_not_reported():
    with Watchdog(TIMEOUT_S) as watchdog, watchdog.stage("update_actor"):
        deadline = time.monotonic() + 3 * TIMEOUT_S
        while time.monotonic() < deadline:
            time.sleep(0.03)
            watchdog.beat("update_actor")
    assert watchdog.hangs == []


def test_stall_progress_stall_reports_twice():
    with Watchdog(TIMEOUT_S) as watchdog, watchdog.stage("weight_sync"):
        _wait_for_hangs(watchdog, 1)
        watchdog.beat()
        _wait_for_hangs(watchdog, 2)
    assert [h.stage for h in watchdog.hangs] == ["weight_sync", "weight_sync"]


def test_nested_and_concurrent_stages_report_the_innermost_of_each_thread():
    def rollout(watchdog: Watchdog, done: threading.Event) -> None:
        with watchdog.stage("generation"):
            done.wait(2.0)

    done = threading.Event()
    with Watchdog(TIMEOUT_S) as watchdog:
        worker = threading.Thread(target=rollout, args=(watchdog, done), name="rollout-thread")
        worker.start()
        with watchdog.stage("fit"), watchdog.stage("update_actor"):
            _wait_for_hangs(watchdog, 2)
        done.set()
        worker.join()
    by_thread = {h.thread_name: h for h in watchdog.hangs}
    assert by_thread["MainThread"].stage == "update_actor"
    assert by_thread["MainThread"].outer_stages == ("fit",)
    assert "inside 'fit'" in by_thread["MainThread"].text
    assert by_thread["rollout-thread"].stage == "generation"
    assert len(watchdog.hangs) == 2


async def hanging_tool_execute(never: asyncio.Event) -> None:
    await never.wait()


async def run_request() -> None:
    await hanging_tool_execute(asyncio.Event())


@pytest.fixture
def loop_in_thread() -> Iterator[tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]]:
    """An event loop running in a daemon thread (like the rollout engine's) with one task
    stuck on an event nobody sets."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="engine-loop", daemon=True)
    thread.start()

    async def spawn() -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(run_request(), name="request-7/tool-call")

    task = asyncio.run_coroutine_threadsafe(spawn(), loop).result(timeout=2)
    yield loop, task
    loop.call_soon_threadsafe(task.cancel)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=2)
    loop.close()


def test_the_report_shows_the_tasks_of_registered_loops(loop_in_thread):
    loop, _ = loop_in_thread
    with Watchdog(TIMEOUT_S) as watchdog:
        watchdog.register_loop(loop, "rollout")
        with watchdog.stage("buffer_wait"):
            _wait_for_hangs(watchdog, 1)
        watchdog.unregister_loop(loop)
    text = watchdog.hangs[0].text
    assert "Event loop 'rollout'" in text
    assert "Task 'request-7/tool-call' coro=run_request" in text
    assert "hanging_tool_execute" in text  # the frame that waits, two awaits down


def test_a_stage_inside_a_task_is_owned_by_the_task(loop_in_thread):
    loop, _ = loop_in_thread

    async def tool_call(watchdog: Watchdog) -> None:
        deadline = time.monotonic() + 2.0
        with watchdog.stage("tool_call", detail="calculator"):
            while not watchdog.hangs and time.monotonic() < deadline:
                await asyncio.sleep(0.02)

    with Watchdog(TIMEOUT_S) as watchdog:
        future = asyncio.run_coroutine_threadsafe(tool_call(watchdog), loop)
        future.result(timeout=2)
    report = watchdog.hangs[0]
    assert (report.stage, report.thread_name) == ("tool_call", "engine-loop")
    assert "in task 'Task-" in report.text


@pytest.mark.parametrize("timeout_s", [None, 0])
def test_a_disabled_watchdog_starts_no_thread(timeout_s):
    with Watchdog(timeout_s) as watchdog, watchdog.stage("generation"):
        watchdog.beat()
        watchdog.beat("generation")
        assert not watchdog.enabled
        assert "agentrl-watchdog" not in [t.name for t in threading.enumerate()]
    assert watchdog.hangs == []


def test_on_hang_gets_the_report_and_its_errors_do_not_stop_the_watchdog(caplog):
    seen: list[HangReport] = []

    def on_hang(report: HangReport) -> None:
        seen.append(report)
        if len(seen) == 1:
            raise RuntimeError("checkpoint failed")

    with caplog.at_level(logging.ERROR, logger="agentrl.trainer.watchdog"), \
            Watchdog(TIMEOUT_S, on_hang=on_hang) as watchdog:
        with watchdog.stage("reward"):
            _wait_for_hangs(watchdog, 1)
        with watchdog.stage("worker_call"):
            _wait_for_hangs(watchdog, 2)
            time.sleep(2 * watchdog.poll_s)  # the callback runs after the report is stored
        assert watchdog._thread is not None and watchdog._thread.is_alive()
    assert [r.stage for r in seen] == ["reward", "worker_call"]
    assert seen == watchdog.hangs
    assert "on_hang callback failed for stage 'reward'" in caplog.text
    assert "checkpoint failed" in caplog.text


def test_stop_joins_the_thread():
    watchdog = Watchdog(TIMEOUT_S)
    watchdog.start()
    watchdog.start()  # already running: no second thread
    assert [t.name for t in threading.enumerate()].count("agentrl-watchdog") == 1
    watchdog.stop()
    assert "agentrl-watchdog" not in [t.name for t in threading.enumerate()]


def test_registered_sources_add_other_processes_stacks_and_their_failures():
    def broken() -> str:
        raise ConnectionError("actor died")

    with Watchdog(TIMEOUT_S) as watchdog, watchdog.stage("wait_for_rollouts"):
        watchdog.register_source("async-rollout", lambda: "in hanging_tool_execute of pid 7")
        watchdog.register_source("gone", broken)
        _wait_for_hangs(watchdog, 1)
    text = watchdog.hangs[0].text
    assert "process 'async-rollout':\nin hanging_tool_execute of pid 7" in text
    assert "process 'gone': stacks unavailable (ConnectionError('actor died'))" in text
