"""rollout_gc: the collector's settings and frozen objects are restored when the last of
nested or concurrent users leaves; cycles made inside are still collected."""

from __future__ import annotations

import gc
import threading

from agentrl.utils.gc_pause import rollout_gc


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
