"""`trainer.trace`: two traced training steps on the tiny model write one Chrome trace each,
holding the trainer's stages (the same intervals as `timing_s/*`), a track per rollout
request with its states, generation and tool calls, and the worker's update and weight sync,
all inside the step and nested; off, nothing is recorded or written."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from agentrl.rollout.backends import GenerationOutput
from agentrl.trainer import PPOTrainer
from agentrl.trainer.tracing import StepTrace, trace_path
from agentrl.utils import trace as trace_module

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>'


class FirstTurnCalls:
    """The worker's real backend, except that every request's first turn calls the
    calculator (a random tiny model never does), so the steps have tool calls to trace."""

    def __init__(self, inner, tokenizer):
        self.inner, self.tokenizer = inner, tokenizer

    async def generate(self, input_ids, sampling_params, request_id):
        out = await self.inner.generate(input_ids, sampling_params, request_id)
        if "-t0-a" not in request_id:
            return out
        text = CALL + self.tokenizer.eos_token
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return GenerationOutput(ids, text, "stop", [-1.0] * len(ids), meta_info=out.meta_info)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _fit(cfg, calls_tools: bool = True):
    trainer = PPOTrainer(cfg)
    try:
        trainer.init_workers()
        if calls_tools:
            engine = trainer.group.worker("actor_rollout").rollout.engine
            engine.backend = FirstTurnCalls(engine.backend, trainer.tokenizer)
        return trainer, trainer.fit()
    finally:
        trainer.close()


def _spans(trace):
    """{(process, track): [X events sorted by start]}, process without its pid."""
    names = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] in ("process_name", "thread_name"):
            names[(e["pid"], e["tid"] if e["name"] == "thread_name" else None)] = e["args"]["name"]
    rows = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            process = names[(e["pid"], None)].split(" (pid")[0]
            rows[(process, names[(e["pid"], e["tid"])])].append(e)
    return {k: sorted(v, key=lambda e: (e["ts"], -e["dur"])) for k, v in rows.items()}


def _parents(row):
    """Each span's enclosing span on its row (None at the top); fails on spans that
    overlap without nesting."""
    stack, parents = [], []
    for e in row:
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
            stack.pop()
        if stack:
            assert e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"], (e, stack[-1])
        parents.append(stack[-1]["name"] if stack else None)
        stack.append(e)
    return parents


def _within(inner, outer):
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


def test_two_traced_steps_write_every_stage_request_call_and_update(make_config, tmp_path):
    cfg = make_config("trainer.total_training_steps=2", "trainer.trace=true",
                      "data.max_response_length=64")  # room for a call, its answer, a reply
    trainer, history = _fit(cfg)

    for step, metrics in enumerate(history, 1):
        path = trace_path(tmp_path / "ckpt" / "trace", step)  # beside metrics.jsonl
        trace = json.loads(path.read_text())
        assert trace["otherData"]["step"] == step and trace["displayTimeUnit"] == "ms"
        rows = _spans(trace)
        for row in rows.values():
            _parents(row)  # every row nests
        assert {p for p, _ in rows} == {"trainer", "rollout", "worker rank 0"}

        # the driver: the step, and each stage as long as its timing_s metric says
        stages = rows[("trainer", "stages")]
        (whole,) = [e for e in stages if e["name"] == "step"]
        assert whole["args"] == {"step": step}
        window = trace["otherData"]["window_us"]
        assert window == [whole["ts"], whole["ts"] + whole["dur"]]
        assert all(_within(e, whole) for row in rows.values() for e in row)
        timed = {k.removeprefix("timing_s/"): v for k, v in metrics.items()
                 if k.startswith("timing_s/") and k != "timing_s/step"}  # fmt: skip
        assert {"gen", "reward", "adv", "update_actor"} <= set(timed)
        assert "old_log_prob" not in timed  # the update made them (actor.fuse_old_log_prob)
        assert sorted(e["name"] for e in stages if e["name"] != "step") == sorted(timed)
        for e in stages:
            if e["name"] != "step":
                assert e["dur"] == pytest.approx(timed[e["name"]] * 1e6, abs=2)
        assert ("save_checkpoint" in timed) == (step == 2)
        gen = next(e for e in stages if e["name"] == "gen")

        # the rollout: a track per request (2 prompts x n=2), each inside the gen stage
        requests = {t: row for (p, t), row in rows.items() if p == "rollout"}
        assert len(requests) == 4 and all(t.startswith("request ") for t in requests)
        for row in requests.values():
            parents = _parents(row)
            names = [e["name"] for e in row]
            assert names[0] == "request" and parents[0] is None and _within(row[0], gen)
            assert row[0]["args"]["state"] == "COMPLETED" and row[0]["args"]["turns"] >= 3
            states = [n for n, p in zip(names, parents, strict=True) if p == "request"]
            assert states[:4] == ["PENDING", "RUNNING", "TOOL_CALLING", "RUNNING"]
            assert states[-1] == "end_plugins"
            generates = [(e, p) for e, p in zip(row, parents, strict=True)
                         if e["name"] == "generate"]  # fmt: skip
            assert len(generates) == 2 and all(p == "RUNNING" for _, p in generates)
            first = generates[0][0]["args"]
            assert first["server"] == "FirstTurnCalls"  # no server_url: the backend's class
            assert first["finish_reason"] == "stop"
            assert first["output_tokens"] == 21 and first["prompt_tokens"] > 0
            assert first["policy_version"] == step - 1  # the weights of the last update
            (tool,) = [(e, p) for e, p in zip(row, parents, strict=True) if e["name"] == "tool"]
            assert tool[1] == "TOOL_CALLING"
            assert tool[0]["args"]["tool"] == "calculator" and tool[0]["args"]["outcome"] == "ok"
            # dur is the difference of two rounded wall-clock microseconds (ends stay nested),
            # each near 1.8e15 where doubles are 0.25 apart: 2 x (0.5 + 0.125) at most
            assert tool[0]["args"]["latency_s"] * 1e6 == pytest.approx(tool[0]["dur"], abs=1.3)

        # the worker: its update and the weight sync inside the driver's update_actor stage
        update_actor = next(e for e in stages if e["name"] == "update_actor")
        worker = rows[("worker rank 0", "update_actor")]
        assert [e["name"] for e in worker] == ["update_policy", "weight_sync"]
        assert all(_within(e, update_actor) for e in worker)
    assert metrics["rollout/tool_calls"] == 4.0


def test_off_no_file_and_no_recorder(make_config, tmp_path, monkeypatch):
    def no_recorder(*args, **kwargs):
        raise AssertionError("a TraceRecorder was made with trainer.trace off")

    monkeypatch.setattr(trace_module.TraceRecorder, "__init__", no_recorder)
    trainer, history = _fit(make_config("trainer.total_training_steps=1"), calls_tools=False)
    assert len(history) == 1 and trainer.trace.enabled is False and trainer.trace.stages is None
    assert not (tmp_path / "ckpt" / "trace").exists()


def test_step_trace_off_is_inert_and_a_failed_step_writes_nothing(tmp_path):
    from agentrl.protocol import DataProto

    off = StepTrace(False, tmp_path / "off")
    batch = DataProto(meta_info={"trace_events": [("p", "t", "x", 0, 1, {})]})
    with off.step(1):
        off.request(batch)
        off.absorb(batch)  # still removed: events never travel on to the next call
    assert batch.meta_info == {} and not (tmp_path / "off").exists()

    on = StepTrace(True, tmp_path / "on")
    with pytest.raises(RuntimeError), on.step(3):
        raise RuntimeError("the step failed")
    assert on.recorder is None and not (tmp_path / "on").exists()
    with on.step(4):
        on.request(batch)
        assert batch.meta_info == {"trace": True}
        stale = ("rollout (pid 1)", "request a", "request", 5, 1, {})  # before the step
        batch.meta_info["trace_events"] = [stale, ("rollout (pid 1)", "request b", "request",
                                                   1 << 62, 1, {})]  # fmt: skip
        on.absorb(batch)
        assert "trace_events" not in batch.meta_info
    on.flush()  # the writer's thread has written the file
    tracks = {e["args"]["name"] for e in json.loads(trace_path(tmp_path / "on", 4).read_text())
              ["traceEvents"] if e["name"] == "thread_name"}  # fmt: skip
    assert tracks == {"stages", "request b"}  # a replayed rollout's old events are left out
    on.close()


def test_step_files_are_written_off_the_step_and_all_there_after_close(tmp_path, monkeypatch):
    """The step hands its events to the writer's thread and goes on; close writes every
    step's file (valid JSON, traceEvents) and stops the thread; no thread when off."""
    import threading

    from agentrl.utils import trace_writer

    release = threading.Event()
    written = trace_writer.write_chrome_trace

    def slow_write(path, events, **other):  # a writer that is still busy when the step ends
        release.wait(timeout=30)
        return written(path, events, **other)

    monkeypatch.setattr(trace_writer, "write_chrome_trace", slow_write)
    on = StepTrace(True, tmp_path / "trace")
    for step in (1, 2):
        with on.step(step), on.stages.span("gen"):
            pass
    assert not (tmp_path / "trace").exists()  # both steps ended; nothing written yet
    thread = on._writer._thread
    release.set()
    on.close()
    assert not thread.is_alive() and on._writer is None
    for step in (1, 2):
        trace = json.loads(trace_path(tmp_path / "trace", step).read_text())
        assert trace["otherData"]["step"] == step
        assert sorted(e["name"] for e in trace["traceEvents"] if e["ph"] == "X") == ["gen", "step"]

    off = StepTrace(False, tmp_path / "off")
    with off.step(1):
        pass
    off.flush()
    off.close()
    assert off._writer is None and not (tmp_path / "off").exists()


@pytest.mark.slow
def test_an_off_policy_trace_shows_the_producer_generating_while_the_actor_trains(make_config):
    """trainer.mode=one_step_off: the producer (its own Ray process) generates the next
    batch while the actor trains on this one; a step's trace holds the producer's requests
    beside the trainer's stages, on the same clock, and some of them overlap the update."""
    from agentrl.trainer import run_train

    cfg = make_config("trainer.mode=one_step_off", "trainer.total_training_steps=3",
                      "trainer.trace=true")  # fmt: skip
    run_train(cfg)
    overlapping = 0
    for step in (1, 2, 3):
        rows = _spans(json.loads(trace_path(cfg_dir(cfg) / "trace", step).read_text()))
        # the last batch is generated during step 2: step 3's producer has nothing to do
        assert ("producer" in {p for p, _ in rows}) == (step < 3)
        stages = {e["name"]: e for e in rows[("trainer", "stages")]}
        assert {"wait_for_rollouts", "reward", "update_actor", "weight_sync"} <= set(stages)
        producer = [e for (p, _), row in rows.items() if p == "producer" for e in row]
        assert all(e["name"] in ("request", "PENDING", "RUNNING", "TOOL_CALLING",
                                              "generate", "tool", "end_plugins")
                                for e in producer)  # fmt: skip
        update = stages["update_actor"]
        overlapping += sum(e["name"] == "generate" and e["ts"] < update["ts"] + update["dur"]
                           and e["ts"] + e["dur"] > update["ts"] for e in producer)  # fmt: skip
    assert overlapping > 0  # the producer generated during an update


def cfg_dir(cfg):
    from pathlib import Path

    return Path(str(cfg.trainer.default_local_dir))


@pytest.mark.slow
def test_two_ray_workers_trace_every_process_on_one_clock(make_config, tmp_path):
    """Two Ray ranks: each rank's rollout and update are in the step's trace (the worker
    group gathers the events of both ranks), each its own process, inside the driver's
    stages on the one wall clock."""
    pytest.importorskip("ray")
    from agentrl.trainer import run_train

    run_train(make_config("trainer.n_gpus_per_node=2", "trainer.total_training_steps=1",
                          "ray_init.num_cpus=2", "trainer.trace=true"))  # fmt: skip
    trace = json.loads(trace_path(tmp_path / "ckpt" / "trace", 1).read_text())
    processes = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    pids = {name: int(name.split("(pid ")[1].rstrip(")")) for name in processes}
    rollouts = [n for n in processes if n.startswith("rollout")]
    workers = sorted(n.split(" (pid")[0] for n in processes if n.startswith("worker"))
    assert len(rollouts) == 2 and workers == ["worker rank 0", "worker rank 1"]
    assert len(set(pids.values())) == 3  # the driver and the two rank processes
    rows = _spans(trace)
    stages = {e["name"]: e for e in rows[("trainer", "stages")]}
    requests = [row[0] for (p, _), row in rows.items() if p == "rollout"]
    assert len(requests) == 4 and all(_within(r, stages["gen"]) for r in requests)
    for rank in (0, 1):
        (update,) = [e for e in rows[(f"worker rank {rank}", "update_actor")]
                     if e["name"] == "update_policy"]  # fmt: skip
        assert _within(update, stages["update_actor"])
