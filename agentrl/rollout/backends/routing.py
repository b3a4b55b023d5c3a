"""Which rollout server gets a generation call: the SGLang client's routing, with no I/O.

    pool = ServerPool(["http://a:30000", "http://b:30000", "http://c:30000"])
    url = pool.pick(session_key("ab12-3-0-t2-a0"))    # turn 2 of trajectory ab12-3-0
    pool.mark_dead(url, "cannot connect")             # a failed call: logged and counted
    url = pool.pick(session_key("ab12-3-0-t2-a0"))    # the trajectory moves to a live server
    pool.metrics()                                    # counts since the last call

- A trajectory's first call goes to the live server with the fewest calls in flight from
  this client (`least_loaded`; ties rotate) or the next live one in turn (`round_robin`).
  Its later turns are pinned to that server while it is alive, so the server's prefix
  cache holds the conversation so far (what SGLang's router and verl's agent loop do with
  session affinity). The pins are a bounded LRU: an evicted trajectory only loses its
  affinity. With one URL (an sglang router) everything goes there.
- A server marked dead is left out of routing until `revive`; the client probes it again
  after a cool-down (agentrl/rollout/backends/sglang.py). `missed_update` records that a
  weight update skipped it, so it may rejoin only holding the current weights.
- A server `drain`ed (its canary diverged after a weight sync, agentrl/workers/canary.py)
  gets no new calls until `readmit`, but stays alive: weight updates and the canary still
  reach it.

The trajectory of a call is read from its id: the rollout engine names each call
`{request_id}-t{turn}-a{attempt}` (agentrl/rollout/generation.py), the gateway
`{session_id}-t{k}-a0` (agentrl/gateway/server.py); `session_key` drops the turn and the
attempt. Any other id (a teacher's) is its own trajectory.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from agentrl.rollout.backends.base import LOAD_BALANCE

logger = logging.getLogger(__name__)

MAX_PINS = 1 << 16  # trajectories remembered for affinity (a batch rarely has more in flight)
_CALL_SUFFIX = re.compile(r"-t\d+-a\d+$")


def session_key(call_id: str) -> str:
    """The trajectory of an engine call id (`{request_id}-t{turn}-a{attempt}` ->
    `request_id`); an id of another shape is returned unchanged."""
    return _CALL_SUFFIX.sub("", call_id)


@dataclass
class ServerState:
    """What the pool knows of one URL."""

    url: str
    dead_reason: str | None = None  # None while alive
    dead_since: float = 0.0  # clock time it was marked dead
    last_probe: float = 0.0  # clock time of the last probe (while dead)
    missed_update: bool = False  # a weight update skipped it while it was dead
    drained_reason: str | None = None  # not None: alive, but no new calls (its canary failed)

    @property
    def alive(self) -> bool:
        return self.dead_reason is None

    @property
    def routable(self) -> bool:
        return self.dead_reason is None and self.drained_reason is None


class ServerPool:
    """Routing state of the data-plane URLs (`server_urls`) and liveness of every URL
    (control URLs too). Not thread-safe: one event loop uses it at a time.

    Args:
        server_urls: the URLs that receive generation calls.
        other_urls: further URLs whose liveness is tracked (workers behind a router).
        load_balance: "least_loaded" or "round_robin", for a trajectory's first call.
        max_pins: trajectories whose server is remembered.
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        server_urls: Sequence[str],
        other_urls: Iterable[str] = (),
        load_balance: str = LOAD_BALANCE[0],
        max_pins: int = MAX_PINS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not server_urls:
            raise ValueError("a server pool needs at least one URL")
        if load_balance not in LOAD_BALANCE:
            raise ValueError(f"load_balance must be one of {LOAD_BALANCE}, got {load_balance!r}")
        self.server_urls = list(server_urls)
        self.load_balance = load_balance
        self.in_flight = dict.fromkeys(self.server_urls, 0)  # calls in flight per server
        self.states = {u: ServerState(u) for u in [*self.server_urls, *other_urls]}
        self.max_pins = max_pins
        self.clock = clock
        self._pins: OrderedDict[str, str] = OrderedDict()
        self._turn = itertools.cycle(self.server_urls)
        self._counts = dict.fromkeys(("retries", "lost", "revived", "sync_skipped"), 0)

    # ---------------------------------------------------------------- routing

    def pick(self, key: str | None = None, exclude: Iterable[str] = ()) -> str | None:
        """The server for a call of trajectory `key` (None: no affinity), never one in
        `exclude`; None when no live server is left."""
        excluded = set(exclude)
        candidates = [u for u in self.server_urls if self.states[u].routable and u not in excluded]
        if not candidates:
            return None
        pinned = self._pins.get(key) if key is not None else None
        if pinned in candidates:
            self._pins.move_to_end(key)
            return pinned
        url = self._choose(candidates)
        if key is not None:
            self._pins[key] = url
            self._pins.move_to_end(key)
            while len(self._pins) > self.max_pins:
                self._pins.popitem(last=False)
        return url

    def pinned(self, key: str) -> str | None:
        """The server trajectory `key` is pinned to, if any."""
        return self._pins.get(key)

    def _choose(self, candidates: list[str]) -> str:
        if self.load_balance == "round_robin":
            least = None
        else:
            least = min(self.in_flight[u] for u in candidates)
        # walk the rotation so that ties spread instead of piling on one URL
        for url in itertools.islice(self._turn, 2 * len(self.server_urls)):
            if url in candidates and (least is None or self.in_flight[url] == least):
                return url
        raise AssertionError("unreachable: every candidate is in the rotation")

    # ---------------------------------------------------------------- liveness

    def alive(self, url: str) -> bool:
        return self.states[url].alive

    def live(self, urls: Iterable[str]) -> list[str]:
        """Those of `urls` that are alive, in order."""
        return [u for u in urls if self.states[u].alive]

    def mark_dead(self, url: str, reason: str) -> bool:
        """Leave `url` out from now on; True when it was alive (then logged and counted)."""
        state = self.states[url]
        if not state.alive:
            return False
        state.dead_reason, state.dead_since = reason, self.clock()
        state.last_probe = state.dead_since
        self._counts["lost"] += 1
        alive = len(self.live(self.server_urls))
        logger.warning("rollout server %s is down, leaving it out (%s); %d of %d servers live",
                       url, reason, alive, len(self.server_urls))  # fmt: skip
        return True

    def revive(self, url: str) -> None:
        """Take `url` back after a probe it passed (logged and counted)."""
        state = self.states[url]
        if state.alive:
            return
        logger.warning("rollout server %s answers again after %.0f s; routing to it", url,
                       self.clock() - state.dead_since)  # fmt: skip
        state.dead_reason, state.missed_update = None, False
        self._counts["revived"] += 1

    def due_for_probe(self, urls: Iterable[str], interval: float) -> list[str]:
        """Dead servers among `urls` not probed for `interval` seconds; each is marked
        probed now, so concurrent callers do not probe it twice."""
        now = self.clock()
        due = [u for u in urls if not self.states[u].alive
               and now - self.states[u].last_probe >= interval]  # fmt: skip
        for url in due:
            self.states[url].last_probe = now
        return due

    def drain(self, url: str, reason: str) -> bool:
        """No new calls to `url` (alive: control calls still reach it) until `readmit`; True
        when it was not drained already (then logged)."""
        state = self.states[url]
        if state.drained_reason is not None:
            state.drained_reason = reason
            return False
        state.drained_reason = reason
        routable = len([u for u in self.server_urls if self.states[u].routable])
        logger.warning("rollout server %s drained: %s; %d of %d servers take calls", url,
                       reason, routable, len(self.server_urls))  # fmt: skip
        return True

    def readmit(self, url: str) -> bool:
        """Route to drained `url` again; True when it was drained (then logged)."""
        state = self.states[url]
        if state.drained_reason is None:
            return False
        state.drained_reason = None
        logger.warning("rollout server %s re-admitted: its canary passes", url)
        return True

    def drained(self) -> list[str]:
        """The drained URLs, in order."""
        return [u for u, s in self.states.items() if s.drained_reason is not None]

    def skipped_update(self, url: str) -> None:
        """A weight update did not reach `url` (dead): counted, and it must prove the
        current version before it rejoins."""
        self.states[url].missed_update = True
        self._counts["sync_skipped"] += 1

    def describe(self, urls: Iterable[str]) -> str:
        """`url (why it is down)` for each of `urls`, for error messages."""
        return "; ".join(f"{u} ({self.states[u].dead_reason or 'alive'})" for u in urls)

    # ---------------------------------------------------------------- metrics

    def count_retry(self) -> None:
        """A call was resent to another server after its server failed."""
        self._counts["retries"] += 1

    def metrics(self) -> dict[str, float]:
        """Counts since the last call (read once per step: per-step counts) and the number
        of live servers now."""
        counts = self._counts
        self._counts = dict.fromkeys(counts, 0)
        return {
            "rollout/server_retries": float(counts["retries"]),
            "rollout/servers_lost": float(counts["lost"]),
            "rollout/servers_revived": float(counts["revived"]),
            "rollout/weight_sync_skipped": float(counts["sync_skipped"]),
            "rollout/servers_alive": float(len(self.live(self.server_urls))),
        }


__all__ = ["MAX_PINS", "ServerPool", "ServerState", "session_key"]
