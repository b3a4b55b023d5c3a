"""`ServerBackend` with an engine's `ServerAPI`: what the base API refuses, and the probe
check every server engine shares (against `agentrl serve`)."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl.rollout.backends.servers import ServerAPI, ServerBackend
from agentrl.rollout.backends.sglang import SGLangAPI, SGLangBackend
from agentrl.rollout.backends.verify import Probe, WeightMismatchError, probe_ids


def test_the_base_api_names_what_an_engine_did_not_bring():
    api = ServerAPI()
    with pytest.raises(NotImplementedError, match="ServerAPI does not score prompts"):
        api.prompt_log_probs_payload([1, 2], "r")
    with pytest.raises(ValueError, match="ServerAPI takes weights from a directory only"):
        list(api.load_tensors({}, 1, None, True))
    assert api.parse_version({"weight_version": 3}) == "3" and api.parse_version([]) is None


def test_a_server_backend_needs_a_url_and_speaks_its_api():
    with pytest.raises(ValueError, match="ServerBackend needs at least one server URL"):
        ServerBackend([], api=SGLangAPI())
    backend = SGLangBackend("127.0.0.1:1")
    assert backend.server_urls == ["http://127.0.0.1:1"] and isinstance(backend.api, SGLangAPI)
    assert backend.weight_sync == "disk"


def _probe(model) -> Probe:
    ids = probe_ids(model.config.vocab_size)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1]
    chosen = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids[1:])[:, None])
    return Probe(ids, chosen[:, 0].tolist(), 1e-3)


def test_the_probe_passes_on_the_served_weights_and_names_a_difference(served,
                                                                       varied_model_dir,
                                                                       tmp_path):  # fmt: skip
    url, _ = served
    model = AutoModelForCausalLM.from_pretrained(varied_model_dir)
    model.save_pretrained(tmp_path / "w")
    good = _probe(model)
    bad = Probe(good.input_ids, [v + 0.01 * (i == 5) for i, v in enumerate(good.log_probs)],
                good.tolerance)

    async def run():
        client = SGLangBackend([url], request_timeout=30)
        try:
            await client.update_weights(str(tmp_path / "w"), weight_version="1")
            verified = await client.verify_weights(str(tmp_path / "w"), good)
            with pytest.raises(WeightMismatchError) as err:
                await client.verify_weights(str(tmp_path / "w"), bad)
            return verified, str(err.value)
        finally:
            await client.aclose()

    verified, message = asyncio.run(run())
    assert verified == 1
    assert "log-probs of the probe sequence differ from the trainer's: token 6" in message
    assert good.mismatch(good.log_probs) is None
    assert "2 log-probs for 31 tokens" in good.mismatch([0.0, 0.0])


class _ChecksumAPI(ServerAPI):
    """A server API whose weight check is one POST of `/check` (answered 200 or not)."""

    async def verify_server(self, request, url, directory, dtype):
        await request("POST", url + "/check", {})


def test_a_server_that_dies_during_the_weight_check_is_left_out_not_fatal(tmp_path):
    """A server killed after the update reached it, before its check: the check verifies the
    others, marks it dead and counts the sync as skipping it (it must prove the version to
    rejoin); with no server left, the check raises naming them."""
    from fastapi import FastAPI

    from agentrl.rollout.backends.base import BackendError
    from agentrl.rollout.backends.launcher import free_port
    from agentrl.utils.serving import serve_in_thread

    app = FastAPI()
    app.post("/check")(lambda: {"ok": True})
    gone = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    fast = {"max_retries": 0, "request_timeout": 10}
    with serve_in_thread(app) as alive:
        backend = ServerBackend([alive, gone], api=_ChecksumAPI(), **fast)
        verified = asyncio.run(backend.verify_weights(str(tmp_path)))
        metrics = backend.metrics()
    assert verified == 1  # the live one; on the old code the dead one's error was raised
    assert not backend.pool.alive(gone) and backend.pool.states[gone].missed_update
    assert metrics["rollout/servers_lost"] == 1 and metrics["rollout/weight_sync_skipped"] == 1
    assert metrics["rollout/servers_alive"] == 1
    nobody = ServerBackend([gone], api=_ChecksumAPI(), **fast)
    with pytest.raises(BackendError, match=f"weight check: no control server answers: {gone} "):
        asyncio.run(nobody.verify_weights(str(tmp_path)))


def _versioned_app(version: str):
    """An SGLang-shaped server that reports `version` and loads a directory's version."""
    from fastapi import FastAPI

    app, state = FastAPI(), {"version": version, "loads": []}
    app.get("/health_generate")(lambda: {})
    app.get("/get_weight_version")(lambda: {"weight_version": state["version"]})

    @app.post("/update_weights_from_disk")
    def load(body: dict) -> dict:
        state["loads"].append(body["model_path"])
        state["version"] = body["weight_version"]
        return {"success": True}

    return app, state


def test_a_sync_loads_a_server_that_returned_and_checks_its_version(tmp_path):
    """A server dead at a sync (missed it) that answers at the next sync, restarted with the
    launch's weights (version 0): the sync probes it, it loads this sync's directory and
    reports its version, and rejoins, so the caller's verify_weights reaches it. On the old
    code a client that never generates (the off-policy workers') never probed it again."""
    from agentrl.utils.serving import serve_in_thread

    app, state = _versioned_app("0")
    fast = {"max_retries": 0, "request_timeout": 10, "server_cooldown_s": 0}
    with serve_in_thread(app) as url, serve_in_thread(_versioned_app("0")[0]) as other:
        backend = SGLangBackend([url, other], **fast)
        backend.pool.mark_dead(url, "connection lost")
        backend.pool.skipped_update(url)  # a sync skipped it while it was down
        backend.pool.states[url].last_probe -= 60  # its cool-down is over
        asyncio.run(backend.update_weights(str(tmp_path / "step_2"), weight_version="2"))
        metrics = backend.metrics()
    assert backend.pool.alive(url) and not backend.pool.states[url].missed_update
    assert state == {"version": "2", "loads": [str(tmp_path / "step_2")]}
    assert metrics["rollout/servers_revived"] == 1 and metrics["rollout/servers_alive"] == 2


def test_a_client_told_the_synced_version_leaves_out_a_server_until_it_reports_it():
    """The off-policy producer's client (it never syncs) is told each sync's version: a dead
    server must report it to rejoin, and a live one that reports another (restarted since)
    is left out; on the old code a restarted server rejoined on its health route alone."""
    from agentrl.utils.serving import serve_in_thread

    restarted, state = _versioned_app("0")
    fast = {"max_retries": 0, "request_timeout": 10, "server_cooldown_s": 0}
    with serve_in_thread(restarted) as url, serve_in_thread(_versioned_app("2")[0]) as synced:
        backend = SGLangBackend([url, synced], **fast)
        asyncio.run(backend.expect_version("2"))
        assert not backend.pool.alive(url) and backend.pool.alive(synced)
        assert "reports weight version 0, not 2" in backend.pool.states[url].dead_reason
        asyncio.run(backend._probe_once(url))  # a probe between syncs: healthy, but version 0
        assert not backend.pool.alive(url)
        state["version"] = "3"  # the workers' next sync reached it (and verified it)
        asyncio.run(backend.expect_version("3"))  # ... then this client is told "3"
        assert not backend.pool.alive(synced)  # it still reports 2: restarted since
        assert backend.pool.alive(url)
        metrics = backend.metrics()
    assert state["loads"] == []  # this client loads nothing: it has no directory
    assert metrics["rollout/servers_lost"] == 2 and metrics["rollout/servers_revived"] == 1
    assert metrics["rollout/weight_sync_skipped"] == 3  # url at both syncs, synced at "3"
