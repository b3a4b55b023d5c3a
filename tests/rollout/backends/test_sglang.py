"""Tests for agentrl/rollout/backends/sglang.py.

End to end against `agentrl serve`'s app on loopback (the same HTTP shapes as SGLang), and
the retry/timeout policy against a small scripted FastAPI server on loopback.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from agentrl.rollout.backends.base import BackendError, GenerationBackend
from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.launcher import free_port
from agentrl.rollout.backends.serve import create_app
from agentrl.rollout.backends.sglang import SGLangBackend, parse_generate_response
from agentrl.utils.serving import serve_in_thread

GREEDY = {"temperature": 0, "max_new_tokens": 10}
FAST = {"backoff": 0.01, "backoff_max": 0.05}


def run(coro):
    return asyncio.run(coro)


async def gather(backend, prompts, params, prefix="r"):
    return await asyncio.gather(
        *(backend.generate(p, params, f"{prefix}{i}") for i, p in enumerate(prompts))
    )


def test_greedy_through_the_server_equals_the_in_process_engine(served, varied_model_dir, prompts):
    url, _ = served
    local = HFBackend.from_pretrained(varied_model_dir)
    client = SGLangBackend(url, request_timeout=60)
    assert isinstance(client, GenerationBackend)

    async def remote(params):
        try:
            return await gather(client, prompts, params)
        finally:
            await client.aclose()

    greedy = run(gather(local, prompts, GREEDY))
    stop_id = greedy[1].output_ids[4]  # so that at least one request stops on a stop token
    for params in (GREEDY, {**GREEDY, "stop_token_ids": [stop_id], "max_new_tokens": 16}):
        expected = run(gather(local, prompts, params))
        got = run(remote(params))
        for mine, theirs in zip(got, expected, strict=True):
            assert mine.output_ids == theirs.output_ids
            assert mine.text == theirs.text
            assert mine.finish_reason == theirs.finish_reason
            assert mine.meta_info["finish_reason"] == theirs.meta_info["finish_reason"]
            torch.testing.assert_close(
                torch.tensor(mine.output_log_probs),
                torch.tensor(theirs.output_log_probs),
                rtol=0,
                atol=1e-5,
            )
    assert expected[1].finish_reason == "stop" and len(expected[1].output_ids) == 5


def test_without_log_probs_and_across_event_loops(served, prompts):
    url, _ = served
    client = SGLangBackend([url + "/"], return_logprob=False, request_timeout=60)
    first = run(client.generate(prompts[0], GREEDY, "a"))
    second = run(client.generate(prompts[0], GREEDY, "a"))  # a new loop, a new httpx client
    assert first.output_log_probs is None
    assert first.output_ids == second.output_ids and len(first.output_ids) == 10


def test_abort_ends_a_running_request(served, prompts):
    url, backend = served
    client = SGLangBackend(url, request_timeout=60)

    async def scenario():
        task = asyncio.ensure_future(client.generate(prompts[0], {"max_new_tokens": 3000}, "L"))
        while backend.num_running == 0:
            await asyncio.sleep(0.01)
        await client.abort("L")
        return await task

    out = run(scenario())
    assert out.finish_reason == "abort"
    assert len(out.output_ids) < 3000
    assert client.in_flight == {url: 0}


def test_cancelling_a_generation_aborts_it_on_the_server(served, prompts):
    url, backend = served
    client = SGLangBackend(url, request_timeout=60)
    before = backend.stats.generated_tokens

    async def scenario():
        task = asyncio.ensure_future(client.generate(prompts[0], {"max_new_tokens": 3000}, "C"))
        while backend.num_running == 0:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.aclose()  # waits for the background abort
        while backend.num_running:
            await asyncio.sleep(0.01)

    run(scenario())
    assert backend.stats.generated_tokens - before < 3000


def test_control_plane_against_the_server(varied_model_dir, tiny_model_dir, prompts):
    backend = HFBackend.from_pretrained(varied_model_dir)
    local = HFBackend.from_pretrained(tiny_model_dir)
    app = create_app(backend, model_path=str(varied_model_dir))
    with serve_in_thread(app, startup_timeout=30) as url:
        client = SGLangBackend(url, request_timeout=60)

        async def scenario():
            await client.wait_until_ready(timeout=30, poll_interval=0.1)
            info = await client.get_model_info()
            assert info["model_path"] == str(varied_model_dir)
            await client.release_memory()
            await client.resume_memory()
            await client.flush_cache(timeout=10)
            await client.update_weights(tiny_model_dir, weight_version="v2")
            assert (await client.get_model_info())["weight_version"] == "v2"
            out = await client.generate(prompts[1], GREEDY, "after")
            with pytest.raises(BackendError, match="does not support") as info:
                await client.update_weights({"model.norm.weight": torch.ones(64)})
            assert info.value.retryable is False
            with pytest.raises(BackendError, match="does not exist"):
                await client.update_weights("/no/such/dir")
            await client.aclose()
            return out

        out = run(scenario())
    expected = run(local.generate(prompts[1], GREEDY, "ref"))
    assert out.output_ids == expected.output_ids
    assert out.meta_info["weight_version"] == "v2"


def test_least_loaded_and_round_robin_spread_requests(tiny_model_dir, prompts):
    backends = [HFBackend.from_pretrained(tiny_model_dir) for _ in range(2)]
    apps = [create_app(b, model_path=str(tiny_model_dir)) for b in backends]
    with (
        serve_in_thread(apps[0], startup_timeout=30) as a,
        serve_in_thread(apps[1], startup_timeout=30) as b,
    ):
        params = {"max_new_tokens": 3}
        least = SGLangBackend([a, b], request_timeout=60)
        run(gather(least, prompts * 2, params))  # 8 at once: 4 each
        assert [sum(x.stats.batch_sizes) for x in backends] == [4, 4]

        turns = SGLangBackend([a, b], load_balance="round_robin", request_timeout=60)

        async def one_by_one():
            for i in range(4):
                await turns.generate(prompts[0], params, f"t{i}")

        run(one_by_one())
        assert [sum(x.stats.batch_sizes) for x in backends] == [6, 6]


# ------------------------------------------------------------ a scripted server on loopback


class Script:
    """What the scripted server answers: a queue of (status, json body, headers) per path."""

    def __init__(self) -> None:
        self.replies: dict[str, list[tuple[int, object, dict]]] = {}
        self.hits: dict[str, list] = {}
        self.delay = 0.0

    def plan(self, path: str, *replies: tuple) -> None:
        """Replies in order; the last one repeats. A reply is (status, body[, headers])."""
        self.replies[path] = [r if len(r) == 3 else (*r, {}) for r in replies]


def scripted_app(script: Script) -> FastAPI:
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def anything(path: str, request: Request) -> Response:
        body = await request.body()
        script.hits.setdefault("/" + path, []).append(body)
        if script.delay and path == "generate":
            await asyncio.sleep(script.delay)
        queue = script.replies.get("/" + path) or [(200, None, {})]
        status, payload, headers = queue.pop(0) if len(queue) > 1 else queue[0]
        if payload is None:
            return Response(status_code=status, headers=headers)
        return JSONResponse(payload, status_code=status, headers=headers)

    return app


OK_REPLY = {
    "text": "hi",
    "output_ids": [5, 6],
    "meta_info": {
        "id": "r",
        "finish_reason": {"type": "stop", "matched": 6},
        "output_token_logprobs": [[-0.5, 5, None], [-0.25, 6, None]],
        "prompt_tokens": 3,
    },
}


@pytest.fixture(scope="module")
def scripted():
    script = Script()
    with serve_in_thread(scripted_app(script), startup_timeout=30) as url:
        yield url, script


@pytest.fixture
def script(scripted):
    url, script = scripted
    script.replies.clear()
    script.hits.clear()
    script.delay = 0.0
    return url, script


def test_retries_5xx_and_429_then_succeeds(script):
    url, script = script
    script.plan(
        "/generate",
        (503, {"error": {"message": "overloaded"}}),
        (429, {"error": {"message": "slow down"}}),
        (200, OK_REPLY),
    )
    out = run(SGLangBackend(url, generate_retries=3, **FAST).generate([1, 2, 3], GREEDY, "r"))
    assert (out.output_ids, out.text, out.finish_reason) == ([5, 6], "hi", "stop")
    assert out.output_log_probs == [-0.5, -0.25]
    assert out.meta_info["finish_reason"] == {"type": "stop", "matched": 6}
    assert len(script.hits["/generate"]) == 3


def test_gives_up_after_max_retries_with_a_retryable_error(script):
    url, script = script
    script.plan("/generate", (500, {"error": {"message": "boom"}}))
    with pytest.raises(BackendError, match="HTTP 500") as info:
        run(SGLangBackend(url, generate_retries=2, **FAST).generate([1], GREEDY, "r"))
    assert info.value.retryable is True
    assert len(script.hits["/generate"]) == 3


def test_generate_is_tried_once_by_default_the_engine_retries(script):
    url, script = script
    script.plan("/generate", (503, {"error": {"message": "overloaded"}}))
    with pytest.raises(BackendError, match="HTTP 503") as info:
        run(SGLangBackend(url, max_retries=3, **FAST).generate([1], GREEDY, "r"))
    assert info.value.retryable is True  # the engine's own retry loop takes it from here
    assert len(script.hits["/generate"]) == 1


def test_a_4xx_fails_at_once_with_the_server_message(script):
    url, script = script
    script.plan("/generate", (400, {"error": {"message": "max_new_tokens is too large"}}))
    with pytest.raises(BackendError, match="max_new_tokens is too large") as info:
        run(SGLangBackend(url, max_retries=3, **FAST).generate([1], GREEDY, "r"))
    assert info.value.retryable is False
    assert len(script.hits["/generate"]) == 1


def test_a_timeout_is_not_retried_and_aborts_the_request(script):
    url, script = script
    script.delay = 2.0
    client = SGLangBackend(url, request_timeout=0.3, max_retries=3, **FAST)

    async def scenario():
        try:
            await client.generate([1], GREEDY, "slow-1")
        finally:
            await client.aclose()

    started = time.monotonic()
    with pytest.raises(BackendError, match="timed out") as info:
        run(scenario())
    assert time.monotonic() - started < 1.9
    assert info.value.retryable is False
    assert len(script.hits["/generate"]) == 1
    assert script.hits["/abort_request"] == [b'{"rid":"slow-1"}']


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ({"text": "x"}, "malformed reply"),
        ({**OK_REPLY, "meta_info": {"finish_reason": {"type": "odd"}}}, "unknown finish_reason"),
        (
            {**OK_REPLY, "output_ids": [9, 9]},
            "output_token_logprobs token ids differ from output_ids",
        ),
    ],
)
def test_malformed_replies_are_not_retried(script, reply, message):
    url, script = script
    script.plan("/generate", (200, reply))
    with pytest.raises(BackendError, match=message) as info:
        run(SGLangBackend(url, **FAST).generate([1], GREEDY, "r"))
    assert info.value.retryable is False


def test_a_dead_server_fails_fast_and_retryable():
    url = f"http://127.0.0.1:{free_port()}"
    client = SGLangBackend(url, max_retries=2, **FAST)
    started = time.monotonic()
    with pytest.raises(BackendError, match="cannot connect") as info:
        run(client.generate([1], GREEDY, "r"))
    assert time.monotonic() - started < 5
    assert info.value.retryable is True
    with pytest.raises(BackendError, match="not ready after"):
        run(client.wait_until_ready(timeout=0.2, poll_interval=0.05))
    run(client.abort("r"))  # best effort: logged, not raised


def test_flush_cache_polls_while_refused(script):
    url, script = script
    script.plan(
        "/flush_cache", (400, {"error": "running"}), (400, {"error": "running"}), (200, None)
    )
    run(SGLangBackend(url, **FAST).flush_cache(timeout=10, poll_interval=0.01))
    assert len(script.hits["/flush_cache"]) == 3
    script.plan("/flush_cache", (400, {"error": "still running"}))
    with pytest.raises(BackendError, match="still running"):
        run(SGLangBackend(url, **FAST).flush_cache(timeout=0.05, poll_interval=0.01))


def test_control_calls_go_to_every_control_url(script, scripted):
    url, script = script
    other = url.replace("127.0.0.1", "localhost")
    client = SGLangBackend("http://router:1", control_urls=[url, other], **FAST)
    script.plan("/update_weights_from_disk", (200, {"success": True, "message": "ok"}))
    run(client.update_weights("/ckpt/step1", weight_version="1"))
    assert len(script.hits["/update_weights_from_disk"]) == 2
    assert script.hits["/update_weights_from_disk"][0] == (
        b'{"model_path":"/ckpt/step1","load_format":null,"abort_all_requests":false,'
        b'"weight_version":"1","flush_cache":true}'
    )
    run(client.release_memory(["kv_cache"]))
    assert script.hits["/release_memory_occupation"] == [b'{"tags":["kv_cache"]}'] * 2
    script.plan("/update_weights_from_disk", (200, {"success": False, "message": "bad ckpt"}))
    with pytest.raises(BackendError, match="bad ckpt"):
        run(client.update_weights("/ckpt/step2"))


def test_update_weights_from_tensor_sends_buckets_in_sglang_format(script):
    url, script = script
    script.plan("/update_weights_from_tensor", (200, {"success": True, "message": "ok"}))
    weights = {f"layer{i}.weight": torch.full((256,), float(i)) for i in range(3)}  # 1 KiB each
    client = SGLangBackend(url, update_weights_bucket_megabytes=2 / 1024, **FAST)  # 2 KiB
    run(client.update_weights(weights, weight_version="5"))
    bodies = [json.loads(b) for b in script.hits["/update_weights_from_tensor"]]
    assert len(bodies) == 2  # two tensors, then one
    assert [b["flush_cache"] for b in bodies] == [False, True]
    assert all(b["weight_version"] == "5" and b["load_format"] is None for b in bodies)
    assert all(len(b["serialized_named_tensors"]) == 1 for b in bodies)
    received = [
        ForkingPickler.loads(base64.b64decode(b["serialized_named_tensors"][0])) for b in bodies
    ]
    names = [name for bucket in received for name, _ in bucket]
    assert names == ["layer0.weight", "layer1.weight", "layer2.weight"]
    for bucket in received:
        for name, tensor in bucket:
            assert torch.equal(tensor, weights[name])


def test_parse_generate_response_variants(tiny_tokenizer):
    out = parse_generate_response([OK_REPLY])
    assert out.output_ids == [5, 6] and "output_token_logprobs" not in out.meta_info
    no_text = {"output_ids": [5, 6], "meta_info": {"finish_reason": "length"}}
    parsed = parse_generate_response(no_text, tiny_tokenizer)
    assert (parsed.text, parsed.finish_reason) == (tiny_tokenizer.decode([5, 6]), "length")
    assert parsed.output_log_probs is None
    only_triples = {
        "text": "",
        "meta_info": {"finish_reason": {"type": "abort"}, "output_token_logprobs": [[-1.0, 7]]},
    }
    assert parse_generate_response(only_triples).output_ids == [7]
    with pytest.raises(ValueError, match="expected one result"):
        parse_generate_response([OK_REPLY, OK_REPLY])


def test_constructor_checks():
    with pytest.raises(ValueError, match="at least one server URL"):
        SGLangBackend([])
    with pytest.raises(ValueError, match="load_balance must be one of"):
        SGLangBackend("http://x", load_balance="random")
    assert SGLangBackend("127.0.0.1:30000/").server_urls == ["http://127.0.0.1:30000"]
