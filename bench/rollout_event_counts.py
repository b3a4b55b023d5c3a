"""What the engine does per event at two batch sizes, counted on a virtual clock (not timed).

    python bench/rollout_event_counts.py --requests 2048 8192 --seed 2
    python bench/rollout_event_counts.py --requests 2048 8192 --seed 2 --tool-slots 1024
    python bench/rollout_event_counts.py --requests 512 2048 --profile   # + calls per event

The async run of `bench/rollout_async_vs_sync.py` (its workload, latency-model backend,
engine config and bound; the capacity is half the requests unless `--capacity` is given)
on an event loop whose clock is virtual: a sleep (the backend's service time, a tool's
latency) takes no wall time, the clock jumps to the next timer when nothing else is ready.
So a busy machine changes nothing the run reports:

- `virtual_over_bound`: the async run's length on that clock over the bound. With the
  default `--clock zero` the engine's CPU costs no time, so what is above 1 comes from how
  requests wait for one another (slots, waves), not from the engine's speed. With `--clock
  cpu` the clock also advances by the event loop's own CPU time (`time.thread_time`), as if
  the loop ran alone on its core; the tokenization check's process runs in real time.
- `loop_cpu_ms_per_event`: the event loop thread's CPU time over the events (CPU time: a
  busy machine inflates it less than wall time, but it is not a count).
- `gc`: the collector's passes per generation and their CPU seconds.
- `checks_in_worker`: tokenization checks the check's process answered (the rest ran on
  the loop).
- with `--profile`: `calls_per_event`, every Python and builtin call cProfile saw over the
  events, and, in the last JSON line, the functions whose calls per event grew most from the
  smallest batch to the largest (work per event that grows with the requests in flight).

One JSON line per batch size, then one comparing the smallest and the largest.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import selectors
import tempfile
import time
from pathlib import Path
from typing import Any

import rollout_async_vs_sync as bench
from transformers import AutoTokenizer


class VirtualSelector(selectors.DefaultSelector):
    """Polls for ready files; a wait with a timeout becomes a jump of the virtual clock."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self.loop = loop

    def select(self, timeout: float | None = None) -> list:
        if timeout is None:  # nothing scheduled: only a file (the check's pipe) can wake us
            return super().select(None)
        ready = super().select(0)
        if not ready and timeout > 0:
            self.loop.skipped += timeout
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is the waits skipped, plus its thread's CPU time with
    `cpu`."""

    def __init__(self, cpu: bool) -> None:
        self.skipped, self.cpu = 0.0, cpu
        super().__init__(VirtualSelector(self))

    def time(self) -> float:
        return self.skipped + (time.thread_time() if self.cpu else 0.0)


class GCPasses:
    """The collector's passes per generation and their CPU seconds, while active."""

    def __init__(self) -> None:
        self.passes = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.thread_time()
            return
        entry = self.passes[info["generation"]]
        entry[0] += 1
        entry[1] += time.thread_time() - self._started

    def __enter__(self) -> GCPasses:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def _calls(stats: pstats.Stats) -> dict[str, int]:
    """Calls per function (file:line:name) in a profile."""
    return {f"{Path(f).name}:{line}:{name}": entry[1]
            for (f, line, name), entry in stats.stats.items()}  # fmt: skip


def count(args: argparse.Namespace, requests: int, tokenizer: Any) -> dict[str, Any]:
    """One async run of `requests` requests on the virtual clock: its counts."""
    run = argparse.Namespace(**{**vars(args), "requests": requests,
                                "capacity": args.capacity or max(1, requests // 2)})  # fmt: skip
    workload = bench.Workload(run)
    backend = bench.LatencyModelBackend(tokenizer, workload, run)
    engine = bench.make_engine(tokenizer, backend, workload, run)
    engine.prepare(requests)  # warm, as the bench's engine
    loop = VirtualClockLoop(cpu=args.clock == "cpu")
    profile = cProfile.Profile() if args.profile else None

    async def rollout() -> float:
        started = loop.time()
        if profile is not None:
            profile.enable()
        try:
            await engine.agenerate_sequences(bench.prompts(requests))
        finally:
            if profile is not None:
                profile.disable()
        return loop.time() - started

    try:
        with GCPasses() as passes:
            cpu = time.thread_time()
            length = loop.run_until_complete(rollout())
            cpu = time.thread_time() - cpu
    finally:
        loop.close()
        engine.close()
    bound, _, _ = bench.lower_bound(workload, backend.busy, run.capacity)
    events = bench.event_count(workload)
    line: dict[str, Any] = {
        "requests": requests, "capacity": run.capacity,
        "tool_slots": run.tool_slots or requests, "seed": args.seed, "clock": args.clock,
        "events": events, "virtual_s": round(length, 3), "bound_s": round(bound, 3),
        "virtual_over_bound": round(length / bound, 4),
        "loop_cpu_ms_per_event": round(cpu / events * 1000, 4),
        "gc": {str(g): {"passes": n, "cpu_s": round(s, 3)} for g, (n, s) in passes.passes.items()},
        "checks_in_worker": engine.check_offload.answered,
    }  # fmt: skip
    if profile is not None:
        calls = _calls(pstats.Stats(profile))
        line["calls_per_event"] = round(sum(calls.values()) / events, 2)
        line["_calls"], line["_events"] = calls, events
    return line


def growth(small: dict[str, Any], large: dict[str, Any], top: int) -> dict[str, Any]:
    """The functions whose calls per event grew most from `small` to `large`."""
    a, b = small.pop("_calls"), large.pop("_calls")
    ea, eb = small.pop("_events"), large.pop("_events")
    rows = sorted(((b.get(k, 0) / eb - a.get(k, 0) / ea, k) for k in set(a) | set(b)),
                  reverse=True)[:top]  # fmt: skip
    return {
        "from_requests": small["requests"], "to_requests": large["requests"],
        "calls_per_event": [small["calls_per_event"], large["calls_per_event"]],
        "grew_most": {k: [round(a.get(k, 0) / ea, 3), round(b.get(k, 0) / eb, 3)]
                      for _, k in rows},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--capacity", type=int, default=None,
                        help="sequences at once (default: half the requests)")
    bench.add_workload_arguments(parser)
    parser.add_argument("--clock", choices=["zero", "cpu"], default="zero",
                        help="zero: the engine's CPU takes no time; cpu: the loop's CPU time")
    parser.add_argument("--profile", action="store_true", help="count calls with cProfile")
    parser.add_argument("--top", type=int, default=15, help="--profile: functions listed")
    args = parser.parse_args()
    if any(n < 1 for n in args.requests):
        parser.error("--requests must be positive")

    from agentrl.models.tiny import make_tiny_model

    model_dir = make_tiny_model(Path(tempfile.mkdtemp()) / "tiny", size="tiny", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lines = [count(args, n, tokenizer) for n in sorted(args.requests)]
    comparison = growth(lines[0], lines[-1], args.top) if args.profile else None
    for line in lines:
        print(json.dumps(line))
    if comparison is not None:
        print(json.dumps(comparison))


if __name__ == "__main__":
    main()
