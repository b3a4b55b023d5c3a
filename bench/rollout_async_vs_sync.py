"""Async per-request rollout vs a turn-synchronous batch rollout, on one multi-turn workload.

    python bench/rollout_async_vs_sync.py                       # latency-model backend
    python bench/rollout_async_vs_sync.py --backend hf --requests 32   # real tiny model, CPU

The workload: `--requests` conversations, each with 1 to `--max-tool-turns` tool turns
(seeded), a scripted model turn of 8-48 filler tokens plus a tool call, and a tool whose
latency per call is lognormal (median `--tool-median` s, sigma `--tool-sigma`, heavy-tailed;
capped at `--tool-cap` s; the tool has no capacity limit: `--tool-slots`, the engine's
`multi_turn.max_concurrent_tool_calls`, is the number of requests unless given). Both
modes run the same AsyncRolloutEngine state handlers
(`engine.step`) and the same script:

(a) async: `agenerate_sequences`, one coroutine per request;
(b) turn-synchronous: every running request generates, then every tool call of the turn
    runs, then the next turn starts (the batch waits for its slowest member each phase).

Backends:

- `latency`: a stand-in for a GPU inference server. A call holds one of `--capacity`
  sequence slots for `--call-overhead + new prompt tokens x --prefill-s + output tokens x
  --decode-s` seconds (a prefix cache: only tokens not seen in the previous call of the
  request are prefilled), then returns the scripted tokens. The bound printed is
  max(critical path = the slowest request's own generation + tool time, total generation
  work / capacity): it has no term for tool slots, so a `--tool-slots` below the requests
  makes it unreachable (tool calls queue first come, first served: the requests with the
  longest tool chains wait behind the others; `bench/rollout_event_counts.py` counts it).
  Targets: (a) within 1.2x of the bound, at least 2x faster than (b).
  The run ends with one JSON line: requests, async_s, bound_s, async_over_bound,
  turn_sync_s and per_event_ms (the async run's time above the bound per generation or
  tool call). The backend's own tokenizer work (reading which conversation a call belongs
  to, the scripted turns' ids) is done before the clock starts or once per request: a GPU
  server tokenizes on its own machine, not on the engine's CPU. The engine is warm, as a
  training run's is from its second batch on: `engine.prepare(requests)` starts its
  tokenization check's process before the clock (when the batch would use it), and the
  engine's `close()` is not timed.
- `hf`: the embedded transformers backend on the tiny offline model: each call generates
  as many tokens as the script's turn (ignore_eos) for the real compute, and returns the
  scripted tokens so both modes follow the same conversation.

A slower machine on purpose (bench/slowed.py): `--busy-share 0.3` runs both modes with a
competing process pinned to each core, busy 30% of every 10 ms at nice -20 (every core ~1.43x
slower, the engine's one event loop included); `--cpu-quota 0.7` runs them in a cgroup
allowed 70% of the machine's CPU time (root; it slows work spread over the cores, not one
busy loop alone). The JSON line records it as `slowed` (null when idle):

    python bench/rollout_async_vs_sync.py --requests 2048 --capacity 1024 --seed 0 --busy-share 0.3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import slowed
from transformers import AutoTokenizer

from agentrl.config import load_config
from agentrl.protocol import DataProto
from agentrl.rollout import AsyncRolloutEngine, RequestState
from agentrl.rollout.backends import GenerationOutput
from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse

FILLER = ("think", "about", "the", "question", "and", "then", "call", "tool", "now", "ok")


class Workload:
    """The seeded script: model turn texts and tool latencies of every conversation."""

    def __init__(self, args: argparse.Namespace):
        rng = random.Random(args.seed)
        self.turns: dict[int, list[str]] = {}
        self.latency: dict[str, float] = {}
        for k in range(args.requests):
            texts = []
            for t in range(rng.randint(1, args.max_tool_turns)):
                key = f"{k}-{t}"
                self.latency[key] = min(
                    args.tool_cap, rng.lognormvariate(math.log(args.tool_median), args.tool_sigma)
                )
                call = json.dumps({"name": "wait", "arguments": {"key": key}})
                texts.append(self._filler(rng) + f"\n<tool_call>\n{call}\n</tool_call><|im_end|>")
            texts.append(self._filler(rng) + " <answer>done</answer><|im_end|>")
            self.turns[k] = texts

    @staticmethod
    def _filler(rng: random.Random) -> str:
        return " ".join(rng.choice(FILLER) for _ in range(rng.randint(8, 48)))


class ScriptCursor:
    """Where each request is in its script, kept by the bench's backends so that a call
    costs the backend almost no tokenizer work: the conversation is read from the first
    call's input (the prompt alone), the turn is counted, and every scripted turn is encoded
    up front, before the clock starts.
    (A GPU server does its tokenization on its own machine, not on the engine's CPU.)"""

    def __init__(self, tokenizer, workload: Workload):
        self.tokenizer, self.workload = tokenizer, workload
        self.conversation: dict[str, int] = {}
        self.turn: dict[str, int] = {}
        self.encoded: dict[tuple[int, int], tuple[list[int], str]] = {  # before the clock
            (k, t): (tokenizer.encode(text, add_special_tokens=False), text)
            for k, texts in workload.turns.items() for t, text in enumerate(texts)
        }

    def next_output(self, input_ids: list[int], request: str) -> tuple[list[int], str]:
        if request not in self.conversation:  # the prompt's end names it
            text = self.tokenizer.decode(input_ids[-32:], skip_special_tokens=False)
            self.conversation[request] = int(re.search(r"conversation (\d+)", text).group(1))
            self.turn[request] = 0
        return self.encoded[(self.conversation[request], self.turn[request])]

    def advance(self, request: str) -> None:
        self.turn[request] += 1


class WaitTool(BaseTool):
    """Sleeps the workload's latency for the call's key."""

    def __init__(self, latency: dict[str, float]):
        super().__init__(
            {},
            OpenAIFunctionToolSchema.model_validate(
                {
                    "type": "function",
                    "function": {
                        "name": "wait",
                        "description": "Wait.",
                        "parameters": {
                            "type": "object",
                            "properties": {"key": {"type": "string"}},
                            "required": ["key"],
                        },
                    },
                }
            ),
        )
        self.latency = latency

    async def execute(self, instance_id: str, parameters: dict, **kwargs: Any):
        await asyncio.sleep(self.latency[parameters["key"]])
        return ToolResponse(text="done"), 0.0, {}


class LatencyModelBackend:
    """A GPU server stand-in: `capacity` slots, time from tokens (see the module docstring)."""

    def __init__(self, tokenizer, workload: Workload, args: argparse.Namespace):
        self.tokenizer, self.workload, self.args = tokenizer, workload, args
        self.slots: asyncio.Semaphore | None = None
        self.seen: dict[str, int] = {}  # request -> tokens already prefilled
        self.busy: dict[str, float] = {}  # request -> generation seconds (service time)
        self.cursor = ScriptCursor(tokenizer, workload)

    async def generate(self, input_ids, sampling_params, request_id) -> GenerationOutput:
        if self.slots is None:
            self.slots = asyncio.Semaphore(self.args.capacity)
        request = request_id.split("-t")[0]
        ids, out_text = self.cursor.next_output(input_ids, request)
        new_tokens = len(input_ids) - self.seen.get(request, 0)
        service = (
            self.args.call_overhead
            + new_tokens * self.args.prefill_s
            + len(ids) * self.args.decode_s
        )
        async with self.slots:
            await asyncio.sleep(service)
        self.seen[request] = len(input_ids) + len(ids)
        self.busy[request] = self.busy.get(request, 0.0) + service
        self.cursor.advance(request)
        return GenerationOutput(list(ids), out_text, "stop", [0.0] * len(ids))

    async def abort(self, request_id: str) -> None:
        return None


class ScriptedHFBackend:
    """The real hf backend's compute, the script's tokens (see the module docstring)."""

    def __init__(self, hf, tokenizer, workload: Workload):
        self.hf, self.tokenizer, self.workload = hf, tokenizer, workload
        self.cursor = ScriptCursor(tokenizer, workload)

    async def generate(self, input_ids, sampling_params, request_id) -> GenerationOutput:
        request = request_id.split("-t")[0]
        ids, out_text = self.cursor.next_output(input_ids, request)
        params = {**sampling_params, "max_new_tokens": len(ids), "ignore_eos": True}
        await self.hf.generate(input_ids, params, request_id)
        self.cursor.advance(request)
        return GenerationOutput(list(ids), out_text, "stop", [0.0] * len(ids))

    async def abort(self, request_id: str) -> None:
        await self.hf.abort(request_id)


async def turn_synchronous(engine: AsyncRolloutEngine, batch: DataProto) -> DataProto:
    """(b): all running requests generate, then all tool calls run, then the next turn."""
    started = time.perf_counter()
    ctx = engine.new_context()
    requests = engine.build_requests(batch, ctx.n)
    await asyncio.gather(*(engine.step(r, ctx) for r in requests))  # PENDING -> RUNNING
    while True:
        running = [r for r in requests if r.state == RequestState.RUNNING]
        if not running:
            break
        await asyncio.gather(*(engine.step(r, ctx) for r in running))
        calling = [
            r for r in requests if r.state in (RequestState.TOOL_CALLING, RequestState.INTERACTING)
        ]
        await asyncio.gather(*(engine.step(r, ctx) for r in calling))
    await asyncio.gather(*(engine.run_request(r, ctx) for r in requests))  # end + finalize
    return engine.collect(requests, batch, time.perf_counter() - started)


def make_engine_config(args):
    return load_config(
        overrides=[
            "data.max_prompt_length=1024",
            "data.max_response_length=4096",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.max_concurrent_requests={args.requests}",
            "actor_rollout_ref.rollout.multi_turn.max_concurrent_tool_calls="
            f"{args.tool_slots or args.requests}",
        ]
    ).actor_rollout_ref.rollout


def make_engine(tokenizer, backend, workload: Workload, args) -> AsyncRolloutEngine:
    return AsyncRolloutEngine(
        make_engine_config(args), tokenizer, backend, {"wait": WaitTool(workload.latency)}
    )


def prompts(n: int) -> DataProto:
    return DataProto.from_dict(
        non_tensors={
            "raw_prompt": [
                [{"role": "user", "content": f"Task of conversation {k}."}] for k in range(n)
            ],
            "tools_kwargs": [{} for _ in range(n)],
        }
    )


def _latency_backend(workload: Workload, args: argparse.Namespace, tokenizer):
    """An agent worker's backend: the latency model with its share of the capacity."""
    shared = argparse.Namespace(**{**vars(args), "capacity": max(1, args.capacity // args.engine_workers)})
    return LatencyModelBackend(tokenizer, workload, shared)


def _wait_tools(latency: dict[str, float]) -> dict[str, BaseTool]:
    return {"wait": WaitTool(latency)}


def busy_from_output(out: DataProto, args: argparse.Namespace) -> dict[str, float]:
    """Each request's generation service time, recomputed from its trajectory (the latency
    model's formula: the tokens before each model turn not yet prefilled, that turn's output
    tokens), for runs whose backends live in other processes."""
    P = out.batch["prompts"].shape[1]
    busy = {}
    for i in range(len(out)):
        mask = out.batch["response_mask"][i].tolist()
        length = int(out.batch["attention_mask"][i, P:].sum())
        new = int(out.batch["attention_mask"][i, :P].sum())  # the prompt, before call 1
        total, position = 0.0, 0
        while position < length:
            start = position
            while position < length and mask[position] == 1:
                position += 1
            total += args.call_overhead + new * args.prefill_s + (position - start) * args.decode_s
            start = position
            while position < length and mask[position] == 0:
                position += 1
            new = position - start  # the tool turn and the next generation prompt
        busy[f"row-{i}"] = total
    return busy


def lower_bound(workload: Workload, busy: dict[str, float], capacity: int
                ) -> tuple[float, float, float]:  # fmt: skip
    """(bound, critical path, generation work / capacity) of a run whose requests spent
    `busy` generation seconds each (module docstring)."""
    tools: dict[str, float] = {}
    for key, seconds in workload.latency.items():
        conversation = key.split("-")[0]
        tools[conversation] = tools.get(conversation, 0.0) + seconds
    own = {r: b + tools.get(r.split("-")[1], 0.0) for r, b in busy.items()}
    critical = max(own.values())
    throughput_bound = sum(busy.values()) / capacity
    return max(critical, throughput_bound), critical, throughput_bound


def event_count(workload: Workload) -> int:
    """Every generation call (one per tool turn, plus the final answer) and every tool
    call: the engine's own cost per event is what the async run spent above the bound."""
    return 2 * len(workload.latency) + len(workload.turns)


def run_sharded(args, workload: Workload):
    """(a) with ``--engine-workers`` engines in Ray actors; wall time and the output."""
    import functools

    import ray

    from agentrl.rollout.sharded import ShardedRolloutEngine

    ray.init(include_dashboard=False, num_cpus=max(2, args.engine_workers))
    cfg = make_engine_config(args)
    engine = ShardedRolloutEngine(
        args.engine_workers, cfg, {"path": str(args.model_dir)},
        functools.partial(_latency_backend, workload, args),
        functools.partial(_wait_tools, workload.latency),
    )  # fmt: skip
    try:
        started = time.perf_counter()
        out = engine.generate_sequences(prompts(args.requests))
        wall = time.perf_counter() - started
    finally:
        engine.close()
        ray.shutdown()
    assert out.meta_info["metrics"]["rollout/failed"] == 0, out.meta_info["metrics"]
    return wall, out


def run_mode(args, tokenizer, workload: Workload, synchronous: bool):
    """Wall time and the backend of one run (a fresh backend per run)."""
    hf = None
    if args.backend == "latency":
        backend = LatencyModelBackend(tokenizer, workload, args)
    else:
        from agentrl.rollout.backends.hf import HFBackend

        hf = HFBackend.from_pretrained(args.model_dir, tokenizer, max_num_seqs=args.capacity)
        backend = ScriptedHFBackend(hf, tokenizer, workload)
    engine = make_engine(tokenizer, backend, workload, args)
    # a warm engine, as from a training run's second batch on: the tokenization check's
    # process (when this batch size checks off the loop) is running before the clock starts
    engine.prepare(args.requests)

    async def go() -> DataProto:
        try:
            if synchronous:
                return await turn_synchronous(engine, prompts(args.requests))
            return await engine.agenerate_sequences(prompts(args.requests))
        finally:
            if hf is not None:
                await hf.aclose()

    started = time.perf_counter()
    try:
        out = asyncio.run(go())
        wall = time.perf_counter() - started
    finally:
        engine.close()  # its tokenization check worker, if it started one (not a rollout's)
    assert out.meta_info["metrics"]["rollout/failed"] == 0, out.meta_info["metrics"]
    return wall, backend, out


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload's and the latency model's options (bench/rollout_event_counts.py too)."""
    parser.add_argument("--max-tool-turns", type=int, default=4)
    parser.add_argument("--tool-median", type=float, default=0.2, help="seconds")
    parser.add_argument("--tool-sigma", type=float, default=1.0, help="lognormal sigma")
    parser.add_argument("--tool-cap", type=float, default=5.0, help="seconds")
    parser.add_argument("--tool-slots", type=int, default=None,
                        help="tool calls at once (multi_turn.max_concurrent_tool_calls); "
                             "default: --requests (the bound assumes no limit)")
    parser.add_argument("--call-overhead", type=float, default=0.01, help="seconds per call")
    parser.add_argument("--prefill-s", type=float, default=2e-5, help="seconds per new token")
    parser.add_argument("--decode-s", type=float, default=2e-3, help="seconds per output token")
    parser.add_argument("--seed", type=int, default=0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["latency", "hf"], default="latency")
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--capacity", type=int, default=32, help="sequences at once")
    add_workload_arguments(parser)
    parser.add_argument("--model-dir", default=None, help="the tokenizer's (hf: and the model's) dir "
                        "(default: a tiny model built in a temporary dir)")
    parser.add_argument("--engine-workers", "--agent-workers", dest="engine_workers", type=int, default=1,
                        help="latency: run (a) over this many engine processes (Ray actors), "
                             "each with capacity / N of the latency model")
    slowed.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.engine_workers > 1 and args.backend != "latency":
        parser.error("--engine-workers > 1 needs --backend latency")
    slowed.check_arguments(parser, args)

    from agentrl.models.tiny import make_tiny_model

    if args.model_dir is None:  # a temporary directory only when one is built
        args.model_dir = make_tiny_model(Path(tempfile.mkdtemp()) / "tiny", size="tiny", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    workload = Workload(args)
    tool_turns = len(workload.latency)
    print(
        f"workload: {args.requests} requests, {tool_turns} tool calls, tool latency "
        f"median {sorted(workload.latency.values())[tool_turns // 2]:.3f} s, "
        f"max {max(workload.latency.values()):.3f} s; backend {args.backend}"
    )

    with slowed.slowed_machine(args) as slowed_record:  # both modes, the set-up excluded
        if args.engine_workers > 1:
            wall_async, out = run_sharded(args, workload)
            busy = busy_from_output(out, args)
        else:
            wall_async, backend, out = run_mode(args, tokenizer, workload, synchronous=False)
            busy = backend.busy
        wall_sync, _, _ = run_mode(args, tokenizer, workload, synchronous=True)
    if slowed_record is not None:
        print(f"slowed machine: {slowed_record}")
    print(f"(a) async engine      {wall_async:8.2f} s")
    print(f"(b) turn-synchronous  {wall_sync:8.2f} s")
    print(f"(b) / (a)             {wall_sync / wall_async:8.2f}x   (target >= 2 on latency)")
    if args.backend == "latency":
        bound, critical, throughput_bound = lower_bound(workload, busy, args.capacity)
        print(
            f"lower bound           {bound:8.2f} s   (critical path {critical:.2f} s, "
            f"work / capacity {throughput_bound:.2f} s)"
        )
        print(f"(a) / bound           {wall_async / bound:8.2f}x   (target <= 1.2)")
        events = event_count(workload)
        per_event_ms = max(wall_async - bound, 0.0) / events * 1000
        print(f"engine cost per event {per_event_ms:8.3f} ms ({events} events)")
        print(json.dumps({
            "requests": args.requests, "engine_workers": args.engine_workers,
            "tool_slots": args.tool_slots or args.requests,
            "async_s": round(wall_async, 3),
            "bound_s": round(bound, 3), "async_over_bound": round(wall_async / bound, 3),
            "turn_sync_s": round(wall_sync, 3), "per_event_ms": round(per_event_ms, 4),
            "slowed": slowed_record,
        }))


if __name__ == "__main__":
    main()
