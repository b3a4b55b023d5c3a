"""Tests for agentrl/rollout/backends/sglang.py with several servers: routing, failover of
calls whose server fails, weight sync that skips a dead server, and a dead server's return.

Fast tests use small scripted servers on loopback (and a socket that resets every
connection); the slow one runs three `agentrl serve` processes and SIGKILLs one of them
while a batch of three-turn trajectories is generating on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import struct
import sys
import threading
import time
from collections import defaultdict
from contextlib import contextmanager

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from agentrl.rollout.backends import servers as servers_module
from agentrl.rollout.backends import sglang as sglang_module
from agentrl.rollout.backends.base import BackendError
from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.launcher import ServerLauncher, free_port
from agentrl.rollout.backends.sglang import SGLangBackend
from agentrl.utils.serving import serve_in_thread

FAST = {"backoff": 0.01, "backoff_max": 0.05, "max_retries": 0}
PARAMS = {"max_new_tokens": 2}
SERVE = [sys.executable, "-m", "agentrl.rollout.backends.serve_cli"]


class Scripted:
    """A fake SGLang server: `/generate` answers two tokens after `delay` seconds; a weight
    update sets `version` (unless `ignores_updates`), which `/get_weight_version` reports;
    anything else is an empty 200. Every body is recorded per path."""

    def __init__(self) -> None:
        self.hits: dict[str, list[dict]] = defaultdict(list)
        self.delay = 0.0
        self.version = "0"
        self.ignores_updates = False

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def anything(path: str, request: Request) -> Response:
            raw = await request.body()
            self.hits["/" + path].append(json.loads(raw) if raw else {})
            if path == "generate":
                await asyncio.sleep(self.delay)
                return JSONResponse({"text": "ok", "output_ids": [5, 6], "meta_info": {
                    "finish_reason": {"type": "length", "length": 2}, "weight_version": self.version,
                    "output_token_logprobs": [[-0.5, 5, None], [-0.25, 6, None]]}})  # fmt: skip
            if path == "get_weight_version":
                return JSONResponse({"weight_version": self.version})
            if path.startswith("update_weights"):
                if not self.ignores_updates:
                    self.version = self.hits["/" + path][-1]["weight_version"]
                return JSONResponse({"success": True, "message": "ok"})
            return Response(status_code=200)

        return app


@contextmanager
def scripted_servers(count: int, ports: list[int] | None = None):
    """`count` scripted servers: yields [(url, Scripted)]."""
    scripts = [Scripted() for _ in range(count)]
    with _serve_all([s.app() for s in scripts], ports or [0] * count) as urls:
        yield list(zip(urls, scripts, strict=True))


@contextmanager
def _serve_all(apps, ports):
    if not apps:
        yield []
        return
    with serve_in_thread(apps[0], port=ports[0], startup_timeout=30) as url, \
            _serve_all(apps[1:], ports[1:]) as rest:  # fmt: skip
        yield [url, *rest]


@contextmanager
def resetting_server():
    """A socket that reads each request and resets the connection without answering
    (what a server killed mid-request does): yields (url, connections accepted)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    accepted = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(conn.recv(65536))
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # linger 0: RST, not FIN

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def run(coro):
    return asyncio.run(coro)


async def closing(backend: SGLangBackend, coro):
    try:
        return await coro
    finally:
        await backend.aclose()


def test_calls_on_a_resetting_server_are_resent_whole_to_another(caplog):
    caplog.set_level(logging.WARNING)
    with resetting_server() as (bad, accepted), scripted_servers(1) as [(good, script)]:
        backend = SGLangBackend([bad, good], request_timeout=30, **FAST)
        prompts = [[1, 2, 3 + i] for i in range(8)]

        async def batch():
            return await asyncio.gather(*(backend.generate(p, PARAMS, f"q{i}-t0-a0")
                                          for i, p in enumerate(prompts)))  # fmt: skip

        outs = run(closing(backend, batch()))
    assert all(o.output_ids == [5, 6] and o.meta_info["server_url"] == good for o in outs)
    metrics = backend.metrics()
    assert len(accepted) >= 1  # the bad server got calls before it was marked dead ...
    assert metrics["rollout/server_retries"] == len(accepted)  # ... each resent once
    assert metrics["rollout/servers_lost"] == 1 and metrics["rollout/servers_alive"] == 1
    # the good server got each prompt exactly once, whole, with the same request id
    received = sorted((h["input_ids"], h["rid"]) for h in script.hits["/generate"])
    assert received == sorted((p, f"q{i}-t0-a0") for i, p in enumerate(prompts))
    assert f"rollout server {bad} is down" in caplog.text
    assert backend.pool.pinned("q0") == good  # the trajectory moved
    assert backend.metrics()["rollout/server_retries"] == 0  # per step: read once


def test_a_server_that_times_out_is_aborted_and_the_call_resent():
    with scripted_servers(2) as [(slow, slow_script), (fast, _)]:
        slow_script.delay = 1.5
        backend = SGLangBackend([slow, fast], request_timeout=0.3, **FAST)
        started = time.monotonic()
        out = run(closing(backend, backend.generate([1, 2], PARAMS, "s-t0-a0")))
        assert time.monotonic() - started < 1.2
        assert slow_script.hits["/abort_request"] == [{"rid": "s-t0-a0"}]
    assert out.meta_info["server_url"] == fast
    assert "timed out" in backend.pool.states[slow].dead_reason
    assert backend.metrics()["rollout/server_retries"] == 1


def test_a_drained_servers_calls_in_flight_are_resent_whole_and_it_gets_no_new_ones(caplog):
    caplog.set_level(logging.WARNING)
    with scripted_servers(2) as [(slow, slow_script), (fast, fast_script)]:
        slow_script.delay = 1.5
        backend = SGLangBackend([slow, fast], request_timeout=30, load_balance="round_robin",
                                **FAST)  # fmt: skip

        async def drained_mid_call():
            call = asyncio.ensure_future(backend.generate([1, 2], PARAMS, "d-t0-a0"))
            await asyncio.sleep(0.3)  # in flight on the slow server (round robin: first)
            assert backend.in_flight[slow] == 1
            backend.drain(slow, "canary log-prob gap 3 > threshold 0.02")
            out = await call
            later = [await backend.generate([3], PARAMS, f"n{i}-t0-a0") for i in range(3)]
            return out, later

        started = time.monotonic()
        out, later = run(closing(backend, drained_mid_call()))
        assert time.monotonic() - started < 1.4  # it did not wait for the slow server
        assert slow_script.hits["/abort_request"] == [{"rid": "d-t0-a0"}]
    assert out.meta_info["server_url"] == fast
    assert [o.meta_info["server_url"] for o in later] == [fast] * 3
    assert [h["rid"] for h in fast_script.hits["/generate"]][:1] == ["d-t0-a0"]
    assert backend.metrics()["rollout/server_retries"] == 1
    assert backend.pool.alive(slow) and backend.drained() == [slow]
    assert f"rollout server {slow} drained: canary log-prob gap 3" in caplog.text
    backend.readmit(slow)
    assert backend.drained() == []


def test_with_every_server_dead_the_error_names_each_url_and_why():
    urls = [dead_url() for _ in range(3)]
    backend = SGLangBackend(urls, **FAST)
    with pytest.raises(BackendError) as info:
        run(backend.generate([1], PARAMS, "d-t0-a0"))
    assert info.value.retryable is True
    assert all(u in str(info.value) for u in urls) and "cannot connect" in str(info.value)
    assert backend.metrics()["rollout/servers_lost"] == 3
    with pytest.raises(BackendError, match="no live rollout server") as again:
        run(backend.generate([1], PARAMS, "e-t0-a0"))  # probed a second ago: not again
    assert all(f"{u} (cannot connect" in str(again.value) for u in urls)


def test_later_turns_stay_on_their_server_through_the_backend():
    with scripted_servers(3) as servers:
        urls = [u for u, _ in servers]
        backend = SGLangBackend(urls, **FAST)

        async def three_turns():
            seen = defaultdict(list)
            for turn in range(3):
                # one-off calls first, so that the rotation stands elsewhere each turn
                others = [backend.generate([2], PARAMS, f"o{turn}-{j}") for j in range(turn + 1)]
                calls = [backend.generate([1, t], PARAMS, f"p{t}-t{turn}-a0") for t in range(6)]
                outs = (await asyncio.gather(*others, *calls))[turn + 1:]
                for t, out in enumerate(outs):
                    seen[t].append(out.meta_info["server_url"])
            return seen

        seen = run(closing(backend, three_turns()))
    assert all(len(set(s)) == 1 for s in seen.values())  # each trajectory on one server
    assert {s[0] for s in seen.values()} == set(urls)  # first turns spread over all three


def test_weight_sync_skips_a_dead_server_and_checks_each_version(caplog, monkeypatch):
    caplog.set_level(logging.WARNING)
    gone = dead_url()
    with scripted_servers(2) as [(a, script_a), (b, script_b)]:
        backend = SGLangBackend([a, b, gone], **FAST)
        run(closing(backend, backend.update_weights("/ckpt/step3", weight_version="3")))
        assert [h["model_path"] for h in script_a.hits["/update_weights_from_disk"]] == [
            "/ckpt/step3"]
        assert len(script_b.hits["/update_weights_from_disk"]) == 1
        metrics = backend.metrics()
        assert metrics["rollout/servers_lost"] == 1
        assert metrics["rollout/weight_sync_skipped"] == 1
        assert backend.pool.states[gone].missed_update
        assert f"rollout server {gone} is down" in caplog.text
        run(closing(backend, backend.update_weights("/ckpt/step4", weight_version="4")))
        assert "weight update 4 skips " + gone in caplog.text  # already known dead
        assert backend.metrics()["rollout/weight_sync_skipped"] == 1
        assert script_a.version == script_b.version == "4"
    with scripted_servers(2) as [(a, _), (b, script_b)]:
        script_b.ignores_updates, script_b.version = True, "4"
        backend = SGLangBackend([a, b], **FAST)
        with pytest.raises(BackendError, match=f"{b} reports 4"):
            run(closing(backend, backend.update_weights("/ckpt/step5", weight_version="5")))
    backend = SGLangBackend([dead_url(), dead_url()], **FAST)
    with pytest.raises(BackendError, match="no control server answers") as info:
        run(backend.update_weights("/ckpt", weight_version="1"))
    assert all(u in str(info.value) for u in backend.control_urls)


def test_a_dead_server_rejoins_after_the_cool_down_only_with_the_current_weights(monkeypatch):
    monkeypatch.setattr(servers_module, "_MIN_PROBE_GAP", 0.05)
    port = free_port()
    gone = f"http://127.0.0.1:{port}"
    with scripted_servers(1) as [(good, _)]:
        backend = SGLangBackend([gone, good], server_cooldown_s=0, **FAST)

        async def scenario():
            await backend.generate([1], PARAMS, "a-t0-a0")  # gone first: marked dead
            await backend.update_weights("/ckpt/step2", weight_version="2")
            with scripted_servers(1, ports=[port]) as [(_, back)]:
                back.ignores_updates = True  # restarted, and cannot load the update: out
                await _call_until(backend, lambda: bool(back.hits["/update_weights_from_disk"]))
                assert not backend.pool.alive(gone) and back.version == "0"
                back.ignores_updates = False  # the next probe loads it: in
                await _call_until(backend, lambda: backend.pool.alive(gone))
                outs = await asyncio.gather(*(backend.generate([1], PARAMS, f"x{i}")
                                              for i in range(4)))  # fmt: skip
                return outs, back

        outs, back = run(closing(backend, scenario()))
    assert {o.meta_info["server_url"] for o in outs} == {gone, good}  # in use again
    assert back.version == "2" and {o.meta_info["weight_version"] for o in outs} == {"2"}
    assert [h["model_path"] for h in back.hits["/update_weights_from_disk"]][-1] == "/ckpt/step2"
    assert len(back.hits["/health_generate"]) >= 2
    metrics = backend.metrics()
    assert metrics["rollout/servers_revived"] == 1 and metrics["rollout/servers_alive"] == 2


def test_a_server_that_missed_a_tensor_update_stays_out(monkeypatch):
    monkeypatch.setattr(servers_module, "_MIN_PROBE_GAP", 0.05)
    monkeypatch.setattr(sglang_module, "serialize_named_tensors", lambda bucket: "b64")
    with scripted_servers(2) as [(a, _), (b, script_b)]:
        backend = SGLangBackend([a, b], server_cooldown_s=0, **FAST)
        backend.pool.mark_dead(b, "test")
        weights = {"w": SimpleTensor()}
        run(closing(backend, backend.update_weights(weights, weight_version="7")))
        run(closing(backend, _call_until(backend, lambda: bool(script_b.hits["/get_weight_version"]))))
    assert not backend.pool.alive(b)  # "0", and nothing to load it from
    assert "/update_weights_from_disk" not in script_b.hits


class SimpleTensor:
    """What `_buckets` reads of a tensor."""

    def numel(self) -> int:
        return 4

    def element_size(self) -> int:
        return 4


async def _call_until(backend: SGLangBackend, condition, deadline_s: float = 10.0) -> None:
    """Generate (each call may start a probe) until `condition()` holds."""
    deadline = time.monotonic() + deadline_s
    i = 0
    while not condition():
        assert time.monotonic() < deadline, "the probe never came"
        await backend.generate([1], PARAMS, f"poll{i}")
        i += 1
        await asyncio.sleep(0.06)


def test_constructor_checks_the_cool_down():
    with pytest.raises(ValueError, match="server_cooldown_s must be >= 0"):
        SGLangBackend("http://x", server_cooldown_s=-1)


# ------------------------------------------------ three `agentrl serve` processes, one killed


TURNS, TRAJECTORIES = 3, 12
GREEDY = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}


async def multi_turn_batch(backend, prompts, user_ids, between_turns=None):
    """Every trajectory's turns in lock-step, as the engine's waves run them: each turn
    sends the whole trajectory so far and appends the output and a fixed user message.
    Returns (trajectories, outputs per trajectory)."""
    ids = [list(p) for p in prompts]
    outputs = [[] for _ in prompts]
    for turn in range(TURNS):
        calls = [backend.generate(list(ids[t]), GREEDY, f"traj{t}-t{turn}-a0")
                 for t in range(len(prompts))]  # fmt: skip
        watcher = asyncio.ensure_future(between_turns(turn)) if between_turns else None
        outs = await asyncio.gather(*calls)
        if watcher is not None:
            await watcher
        for t, out in enumerate(outs):
            outputs[t].append(out)
            ids[t] += out.output_ids + (user_ids if turn < TURNS - 1 else [])
    return ids, outputs


# Two logits this close (relative) are a tie: the batch a server happens to form changes the
# float sums by ~1e-6, so a tie may go either way there and not in one engine's batch.
TIE = 1e-3


def assert_greedy(model, ids: list[int], positions: list[int], what: str) -> None:
    """Each token of ``ids`` at ``positions`` is ``model``'s greedy choice given the tokens
    before it, up to a tie: what a server made from the right context, whatever its batch."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    for i in positions:
        row = logits[i - 1]
        best, chosen = float(row.max()), float(row[ids[i]])
        assert best - chosen <= TIE * max(1.0, abs(best)), (
            f"{what}: token {i} is {ids[i]} (logit {chosen:.4f}), greedy is "
            f"{int(row.argmax())} ({best:.4f})"
        )


def generated_positions(prompt_len: int, outs: list, user_len: int) -> list[int]:
    """Where a trajectory of multi_turn_batch holds the model's tokens."""
    positions, start = [], prompt_len
    for turn, out in enumerate(outs):
        positions += range(start, start + len(out.output_ids))
        start += len(out.output_ids) + (user_len if turn < len(outs) - 1 else 0)
    return positions


@pytest.mark.slow
def test_three_servers_one_killed_mid_batch(varied_model_dir, tiny_tokenizer, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    texts = ["1+2=", "hello there", "the of and to", "calculator", "x y z", "once upon a"]
    prompts = [tiny_tokenizer.encode(texts[t % 6] + " " * (t // 6)) for t in range(TRAJECTORIES)]
    user_ids = tiny_tokenizer.encode("\nuser: go on\n")
    local = HFBackend.from_pretrained(varied_model_dir)
    expected, _ = run(multi_turn_batch(local, prompts, user_ids))
    launcher = ServerLauncher(varied_model_dir, 3, command=SERVE,
                              server_args={"max_num_seqs": 16}, ready_timeout=180,
                              poll_interval=0.2, log_dir=tmp_path)  # fmt: skip
    with launcher:
        urls = launcher.urls
        victim = launcher.servers[0]
        backend = SGLangBackend(urls, request_timeout=60, max_retries=0)
        killed_at = {}

        async def kill_during_turn_1(turn):
            if turn != 1:
                return
            pinned = [t for t in range(TRAJECTORIES)
                      if backend.pool.pinned(f"traj{t}") == victim.url]  # fmt: skip
            # turn 1 goes to the servers of turn 0: wait until the victim has its calls
            deadline = time.monotonic() + 30
            while backend.in_flight[victim.url] < len(pinned):
                assert time.monotonic() < deadline, "turn 1 never reached the victim"
                await asyncio.sleep(0.001)
            victim.process.kill()  # SIGKILL while they generate
            killed_at["pinned"] = pinned

        async def scenario():
            ids, outputs = await multi_turn_batch(backend, prompts, user_ids, kill_during_turn_1)
            metrics = backend.metrics()
            await backend.update_weights(varied_model_dir, weight_version="2")
            versions = [await backend._reported_version(u) for u in urls[1:]]
            after = await asyncio.gather(*(backend.generate(p, GREEDY, f"after{i}")
                                           for i, p in enumerate(prompts)))  # fmt: skip
            return ids, outputs, metrics, backend.metrics(), versions, after

        ids, outputs, metrics, sync_metrics, versions, after = run(closing(backend, scenario()))
        for server in launcher.servers[1:]:
            server.process.kill()
        with pytest.raises(BackendError) as everyone_dead:
            run(backend.generate([1, 2], GREEDY, "last-t0-a0"))
    # every trajectory complete, each model turn once, the tokens one engine made: the same
    # ids, or where a server's batch broke a tie the other way, greedy from there on
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(varied_model_dir).eval()
    for t in [t for t in range(TRAJECTORIES) if ids[t] != expected[t]]:
        assert_greedy(model, ids[t], generated_positions(len(prompts[t]), outputs[t],
                                                         len(user_ids)), f"trajectory {t}")
    for outs in outputs:
        assert [len(o.output_ids) for o in outs] == [12] * TURNS
        assert all(len(o.output_log_probs) == 12 and o.finish_reason == "length" for o in outs)
    # routing: each trajectory on one server; those on the victim moved once, to one server
    moved = killed_at["pinned"]
    assert moved, "no trajectory was on the killed server"
    for t, outs in enumerate(outputs):
        servers = [o.meta_info["server_url"] for o in outs]
        if t in moved:
            assert servers[0] == victim.url and victim.url not in servers[1:]
            assert len(set(servers[1:])) == 1
        else:
            assert len(set(servers)) == 1 and servers[0] != victim.url
    assert {outs[0].meta_info["server_url"] for outs in outputs} == set(urls)
    assert metrics["rollout/server_retries"] == len(moved)  # their turn-1 calls, in flight
    assert metrics["rollout/servers_lost"] == 1 and metrics["rollout/servers_alive"] == 2
    assert f"rollout server {victim.url} is down" in caplog.text
    # weight sync reached the two live servers, skipped the dead one; outputs carry "2"
    assert versions == ["2", "2"]
    assert sync_metrics["rollout/weight_sync_skipped"] == 1
    assert {o.meta_info["weight_version"] for o in after} == {"2"}
    for i, (prompt, out) in enumerate(zip(prompts, after, strict=True)):
        if out.output_ids != outputs[i][0].output_ids:
            assert_greedy(model, prompt + out.output_ids,
                          list(range(len(prompt), len(prompt) + 12)), f"after sync {i}")
    # nobody left: the error names every server and why it is down
    message = str(everyone_dead.value)
    assert all(u in message for u in urls)
    reason = r"(cannot connect to |connection lost: )" + re.escape(victim.url + "/generate")
    assert re.search(re.escape(victim.url) + r" \(" + reason, message)
