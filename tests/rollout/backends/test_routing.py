"""Tests for agentrl/rollout/backends/routing.py: the SGLang client's routing, with fake
servers (URLs only, a fake clock) and the engine's call ids."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from agentrl.rollout.backends.base import GenerationOutput
from agentrl.rollout.backends.routing import ServerPool, session_key
from agentrl.rollout.generation import generate_with_retries

A, B, C = "http://a:1", "http://b:1", "http://c:1"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def busy(pool: ServerPool, url: str, n: int = 1) -> None:
    pool.in_flight[url] += n


def test_session_key_drops_the_engines_turn_and_attempt():
    assert session_key("ab12cd34-3-0-t2-a1") == "ab12cd34-3-0"
    assert session_key("ab12cd34-3-0-t0-a0") == session_key("ab12cd34-3-0-t7-a3")
    for other in ("teacher-x-3", "sess-1f2e3d4c", "r0", "x-t1", "x-a1-t1"):
        assert session_key(other) == other


def test_the_engine_names_its_calls_so_that_they_map_to_their_request():
    """The contract with agentrl/rollout/generation.py: every call of a request (any turn,
    any attempt) has the request id as its session key."""
    seen = []

    class Backend:
        fails = 1

        async def generate(self, input_ids, params, call_id):
            seen.append(call_id)
            if self.fails:
                self.fails -= 1
                from agentrl.rollout.backends.base import BackendError

                raise BackendError("boom", retryable=True)
            return GenerationOutput([1], "x", "stop")

    req = SimpleNamespace(request_id="ab12cd34-3-0", input_ids=[1, 2],
                          metrics=SimpleNamespace(assistant_turns=0, generation_s=0.0,
                                                  backend_retries=0, backend_errors=0))  # fmt: skip

    async def two_turns():
        slots = asyncio.Semaphore(1)
        for turn in range(2):
            req.metrics.assistant_turns = turn
            out = await generate_with_retries(Backend(), req, {}, slots, timeout=5,
                                              max_retries=2, backoff=0.001)  # fmt: skip
            assert out is not None

    asyncio.run(two_turns())
    assert len(seen) == 4 and len(set(seen)) == 4  # two turns, each failed once
    assert {session_key(c) for c in seen} == {"ab12cd34-3-0"}


def test_first_calls_go_to_the_least_loaded_server_and_ties_rotate():
    pool = ServerPool([A, B, C])
    assert {pool.pick(None) for _ in range(3)} == {A, B, C}  # idle: ties rotate
    busy(pool, A, 2)
    busy(pool, B, 1)
    assert pool.pick("t1") == C
    for i in range(6):
        busy(pool, pool.pick(f"t{i + 2}"))
    assert sorted(pool.in_flight.values()) == [3, 3, 3]  # 3 + 6 calls, always the least


def test_round_robin_ignores_load():
    pool = ServerPool([A, B, C], load_balance="round_robin")
    busy(pool, A, 5)
    assert [pool.pick(f"t{i}") for i in range(6)] == [A, B, C, A, B, C]


def test_later_turns_stay_on_the_first_server_even_when_it_is_busier():
    pool = ServerPool([A, B])
    first = pool.pick(session_key("traj-t0-a0"))
    busy(pool, first, 10)
    assert pool.pick(session_key("traj-t1-a0")) == first
    assert pool.pick(session_key("traj-t2-a1")) == first
    assert pool.pinned("traj") == first
    other = pool.pick(session_key("new-t0-a0"))
    assert other != first  # a new trajectory still goes to the least loaded


def test_a_dead_server_is_left_out_and_its_trajectories_move():
    pool = ServerPool([A, B, C])
    assert pool.pick("t") == A
    assert pool.mark_dead(A, "cannot connect") is True
    assert pool.mark_dead(A, "again") is False  # counted once
    moved = pool.pick("t")
    assert moved in (B, C)
    assert pool.pinned("t") == moved
    assert all(pool.pick(f"x{i}") != A for i in range(10))
    assert pool.pick("t", exclude=[moved]) not in (A, moved, None)
    assert pool.pick("y", exclude=[B, C]) is None
    assert pool.describe([A, B]) == f"{A} (cannot connect); {B} (alive)"


def test_a_drained_server_gets_no_calls_but_stays_alive_until_readmitted():
    pool = ServerPool([A, B])
    assert pool.pick("t") == A
    assert pool.drain(A, "canary diverged") is True
    assert pool.drain(A, "again") is False
    assert pool.alive(A) and pool.live([A, B]) == [A, B]  # control calls still reach it
    assert pool.drained() == [A]
    assert pool.pick("t") == B and all(pool.pick(f"x{i}") == B for i in range(5))
    assert pool.pick("y", exclude=[B]) is None
    assert pool.readmit(A) is True and pool.readmit(A) is False
    assert pool.drained() == [] and pool.pick("z", exclude=[B]) == A


def test_pins_are_a_bounded_lru():
    pool = ServerPool([A, B], max_pins=2)
    pool.pick("t1")
    pool.pick("t2")
    pool.pick("t1")  # t1 used again: t2 is now the oldest
    pool.pick("t3")
    assert pool.pinned("t2") is None
    assert pool.pinned("t1") is not None and pool.pinned("t3") is not None


def test_probes_are_due_after_the_interval_and_claimed_once():
    clock = Clock()
    pool = ServerPool([A, B], other_urls=[C], clock=clock)
    pool.mark_dead(A, "reset")
    pool.mark_dead(C, "refused")  # a control URL only
    assert pool.due_for_probe(pool.states, 30) == []
    clock.now += 30
    assert pool.due_for_probe(pool.states, 30) == [A, C]
    assert pool.due_for_probe(pool.states, 30) == []  # claimed: no second probe
    pool.revive(A)
    assert pool.alive(A) and pool.pick("t", exclude=[B]) == A


def test_metrics_count_per_step_and_log_the_lost_server(caplog):
    pool = ServerPool([A, B, C])
    caplog.set_level(logging.WARNING, logger="agentrl.rollout.backends.routing")
    pool.mark_dead(B, "cannot connect to http://b:1/generate")
    pool.count_retry()
    pool.count_retry()
    pool.skipped_update(B)
    assert pool.states[B].missed_update
    assert f"rollout server {B} is down" in caplog.text and "2 of 3 servers live" in caplog.text
    assert pool.metrics() == {
        "rollout/server_retries": 2.0,
        "rollout/servers_lost": 1.0,
        "rollout/servers_revived": 0.0,
        "rollout/weight_sync_skipped": 1.0,
        "rollout/servers_alive": 2.0,
    }
    pool.revive(B)
    assert not pool.states[B].missed_update
    second = pool.metrics()
    assert second["rollout/servers_lost"] == 0 and second["rollout/server_retries"] == 0
    assert second["rollout/servers_revived"] == 1 and second["rollout/servers_alive"] == 3


def test_constructor_checks():
    with pytest.raises(ValueError, match="at least one URL"):
        ServerPool([])
    with pytest.raises(ValueError, match="load_balance must be one of"):
        ServerPool([A], load_balance="random")
