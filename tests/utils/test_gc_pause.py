"""rollout_gc: the collector's settings and frozen objects are restored when the last of
nested or concurrent users leaves; cycles made inside are still collected."""

from __future__ import annotations

import gc
import threading

from agentrl.utils.gc_pause import (
    YOUNG_PER_REQUEST,
    YOUNG_THRESHOLD,
    rollout_gc,
    young_threshold_for,
)


class Node:
    def __init__(self):
        self.other = self


def test_settings_are_restored_after_nested_and_concurrent_use():
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    with rollout_gc(young_threshold=12345):
        assert gc.get_threshold()[0] == 12345
        assert gc.get_freeze_count() >= frozen_before  # what existed is frozen
        with rollout_gc():
            assert gc.get_threshold()[0] == 12345  # the outer user's settings hold
        assert gc.get_threshold()[0] == 12345

        entered, leave = threading.Event(), threading.Event()

        def other_user():
            with rollout_gc():
                entered.set()
                leave.wait(10)

        thread = threading.Thread(target=other_user)
        thread.start()
        entered.wait(10)
    assert gc.get_threshold()[0] == 12345  # the thread still holds it
    leave.set()
    thread.join()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen_before


def test_cycles_made_inside_are_collected_and_a_disabled_collector_is_left_alone():
    with rollout_gc():
        node = Node()
        alive = [id(node)]
        del node
        gc.collect()
        assert not any(id(o) == alive[0] for o in gc.get_objects() if isinstance(o, Node))
    gc.disable()
    try:
        before = gc.get_threshold()
        with rollout_gc(young_threshold=999):
            assert gc.get_threshold() == before and not gc.isenabled()
    finally:
        gc.enable()


class Call:
    """One call's reference cycle (a task's frame and its future, in a rollout): garbage
    only the collector frees, once the call is over."""

    def __init__(self):
        self.me = self


def _survivors_per_event(in_flight: int, young_threshold: int) -> float:
    """Objects the young-generation passes find still alive (and move up, to be traversed
    again), per event, when `in_flight` requests each hold one call's cycle and every event
    ends one call and starts the next (128 events per request)."""
    calls = [Call() for _ in range(in_flight)]
    survivors = 0
    started_with = 0

    def count(phase: str, info: dict) -> None:
        nonlocal survivors, started_with
        if info["generation"] != 0:
            return
        if phase == "start":
            started_with = len(gc.get_objects(0))
        else:
            survivors += started_with - info["collected"]

    events = 128 * in_flight
    with rollout_gc(young_threshold=young_threshold):
        gc.callbacks.append(count)
        try:
            for event in range(events):
                calls[event % in_flight] = Call()
        finally:
            gc.callbacks.remove(count)
    return survivors / events


def test_the_young_passes_keep_the_same_share_per_event_as_requests_grow():
    fixed = [_survivors_per_event(n, YOUNG_THRESHOLD) for n in (2048, 8192)]
    scaled = [_survivors_per_event(n, young_threshold_for(n)) for n in (2048, 8192)]
    assert fixed[1] > 3 * fixed[0]  # a fixed threshold: 4x the requests, ~4x the survivors
    assert scaled[1] < 1.25 * scaled[0], scaled  # in proportion: the same per event
    assert young_threshold_for(2048) == YOUNG_THRESHOLD  # below ~2,048 requests: unchanged
    assert young_threshold_for(8192) == 4 * YOUNG_PER_REQUEST * 2048
