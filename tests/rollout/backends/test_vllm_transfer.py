"""Tests for agentrl/rollout/backends/vllm_transfer.py: vLLM's GPU weight transfer, driven
against recording vLLM stand-ins over HTTP (the route sequence and bodies of vLLM 0.32,
docs/vllm_api_notes.md) with a trainer engine that broadcasts onto a shared "wire", and, in
the vLLM environment, through vLLM's own NCCL trainer engine with only the NCCL calls
stubbed (no GPU here)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import pickle
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentrl.rollout.backends.base import BackendError
from agentrl.rollout.backends.registry import backend_problems
from agentrl.rollout.backends.verify import WeightMismatchError
from agentrl.rollout.backends.vllm import VLLMBackend
from agentrl.rollout.backends.vllm_transfer import (
    TransferSource,
    VLLMWeightTransfer,
    json_safe,
    transfer_problems,
)
from agentrl.utils.serving import serve_in_thread

REPO = Path(__file__).resolve().parents[3]


def weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(16, 8, generator=g),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=g),
        "model.layers.0.self_attn.k_proj.weight": torch.randn(4, 8, generator=g),
        "model.layers.0.self_attn.v_proj.weight": torch.randn(4, 8, generator=g),
        "model.layers.0.mlp.gate_proj.weight": torch.randn(12, 8, generator=g),
        "model.layers.0.mlp.up_proj.weight": torch.randn(12, 8, generator=g),
        "model.norm.weight": torch.randn(8, generator=g),
    }


class Wire:
    """What rank 0 broadcast in one update, and when it was done."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.done = threading.Event()
        self.joined = threading.Semaphore(0)  # a server's /update_weights is waiting


class FakeVLLM:
    """A vLLM server's weight-transfer routes: records every call; `/update_weights` blocks
    until the wire is done (as the NCCL receive does) and then holds what the update_info
    named; `/weight_checker` answers vLLM's fused SHA-256 digests of what it holds."""

    def __init__(self, log: list, wire: Wire) -> None:
        self.log, self.wire = log, wire
        self.url = ""
        self.held: dict[str, torch.Tensor] = {}
        self.version = "0"
        self.pending_version: str | None = None
        self.ignores_version = False
        self.fail: dict[str, int] = {}  # route -> status code
        self.corrupt: str | None = None  # a tensor to hold wrong

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def route(path: str, request: Request):
            raw = await request.body()
            body = json.loads(raw) if raw else None
            query = f"?{request.url.query}" if request.url.query else ""
            self.log.append((self.url, "/" + path + query, body, self.wire.done.is_set()))
            if "/" + path in self.fail:
                return JSONResponse({"error": "boom"}, status_code=self.fail["/" + path])
            if path == "update_weights":
                self.wire.joined.release()
                await asyncio.to_thread(self.wire.done.wait, 10)
                info = body["update_info"]
                for name, dtype, shape in zip(info["names"], info["dtype_names"], info["shapes"],
                                              strict=True):  # fmt: skip
                    tensor = self.wire.tensors[name]
                    assert str(tensor.dtype).split(".")[-1] == dtype and list(tensor.shape) == shape
                    self.held[name] = tensor.clone()
                if self.corrupt:
                    self.held[self.corrupt] = self.held[self.corrupt] + 1
                return {"message": "Weights updated"}
            if path == "finish_weight_update" and body and not self.ignores_version:
                self.version = body["weight_version"]
            if path == "weight_info":
                return {"weight_version": self.version}
            if path == "weight_checker":
                return {"checksums": {f"dp0:pp0:pcp0:tp0:{k}": v for k, v in self.digests().items()}}
            return {"message": "ok"}

        return app

    def digests(self) -> dict[str, str]:
        held, out = dict(self.held), {}
        for fused, parts in (("qkv_proj", ("q_proj", "k_proj", "v_proj")),
                             ("gate_up_proj", ("gate_proj", "up_proj"))):  # fmt: skip
            for name in [n for n in held if f".{parts[0]}." in n]:
                names = [name.replace(f".{parts[0]}.", f".{p}.") for p in parts]
                out[name.replace(f".{parts[0]}.", f".{fused}.")] = _sha(torch.cat([held.pop(n) for n in names]))
        out.update({name: _sha(t) for name, t in held.items()})
        return out


def _sha(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


class BroadcastEngine:
    """A trainer engine as vLLM's NCCL one drives the client (nccl_engine.py): init from a
    side thread at rendezvous; per round start, update_weights in flight while rank 0
    broadcasts every tensor of the source in order, finish. The broadcast lands on `wire`."""

    def __init__(self, method, fields, client, source, wire: Wire) -> None:
        self.fields, self.client, self.source, self.wire = dict(fields), client, source, wire
        self.sends = 0
        self.shut = False
        if fields["rank"] == 0:
            init = ({"master_address": fields["master_address"], "master_port": fields["master_port"],
                     "rank_offset": 1, "world_size": fields["world_size"], "packed": True}
                    if method == "nccl" else {"packed": False})  # fmt: skip
            with ThreadPoolExecutor(1) as exe:
                exe.submit(client.init_weight_transfer_engine, init).result()

    def send_weights(self) -> None:
        self.sends += 1
        meta = self.source.metadata()
        if self.fields["rank"] != 0:
            for _ in self.source:
                pass
            return
        self.wire.done.clear()
        self.wire.tensors = {}
        self.client.start_weight_update()
        with ThreadPoolExecutor(1) as exe:
            future = exe.submit(self.client.update_weights, {
                "names": [m.name for m in meta], "dtype_names": [str(m.dtype).split(".")[-1] for m in meta],
                "shapes": [list(m.shape) for m in meta]})  # fmt: skip
            for _ in self.client.urls:  # a collective: every receiver has joined
                assert self.wire.joined.acquire(timeout=10)
            for name, tensor in self.source:
                self.wire.tensors[name] = tensor
            self.wire.done.set()
            future.result()
        self.client.finish_weight_update()

    def shutdown(self) -> None:
        self.shut = True


class Servers:
    def __init__(self, count: int) -> None:
        self.log: list = []
        self.wire = Wire()
        self.fakes = [FakeVLLM(self.log, self.wire) for _ in range(count)]
        self._stack = ExitStack()

    def __enter__(self) -> Servers:
        for fake in self.fakes:
            fake.url = self._stack.enter_context(serve_in_thread(fake.app(), startup_timeout=30))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    @property
    def urls(self) -> list[str]:
        return [f.url for f in self.fakes]

    def start(self, rank: int = 0, method: str = "nccl", **kwargs) -> VLLMWeightTransfer:
        state = weights()
        engines = []

        def trainer_init(method_, fields, client, source):
            engines.append(BroadcastEngine(method_, fields, client, source, self.wire))
            return engines[-1]

        transfer = VLLMWeightTransfer.start(method, self.urls, lambda: iter(state.items()), rank=rank,
                                            trainer_init=trainer_init, **kwargs)  # fmt: skip
        transfer.state = state
        return transfer

    def calls(self, url: str) -> list[str]:
        return [path for u, path, _, _ in self.log if u == url]


def test_nccl_sync_runs_vllms_sequence_on_every_server_and_verifies_what_it_sent():
    with Servers(2) as servers:
        transfer = servers.start(dtype=torch.bfloat16, tensor_parallel=2,
                                 options={"master_address": "10.0.0.1", "master_port": 29611})
        inits = [(u, b) for u, p, b, _ in servers.log if p == "/init_weight_transfer_engine"]
        # each server's workers get their own ranks after the trainer's rank 0
        assert [dict(inits)[u]["init_info"]["rank_offset"] for u in servers.urls] == [1, 3]
        assert {b["init_info"]["world_size"] for _, b in inits} == {5}
        assert {b["init_info"]["master_address"] for _, b in inits} == {"10.0.0.1"}
        servers.log.clear()
        assert transfer.send("3", verify=True) == 2
        for url in servers.urls:
            assert servers.calls(url) == [
                "/pause?mode=keep", "/start_weight_update", "/update_weights",
                "/finish_weight_update", "/reset_prefix_cache", "/resume", "/weight_info",
                "/weight_checker"]  # fmt: skip
        updates = [(b, done) for _, p, b, done in servers.log if p == "/update_weights"]
        assert all(not done for _, done in updates)  # in flight before the broadcast ended
        info = updates[0][0]["update_info"]
        assert info["names"] == list(transfer.state)
        assert set(info["dtype_names"]) == {"bfloat16"}  # cast to the servers' dtype
        finishes = [b for _, p, b, _ in servers.log if p == "/finish_weight_update"]
        assert finishes == [{"weight_version": "3"}] * 2
        for fake in servers.fakes:
            assert fake.version == "3"
            torch.testing.assert_close(fake.held["model.norm.weight"],
                                       transfer.state["model.norm.weight"].to(torch.bfloat16))  # fmt: skip
        servers.log.clear()
        assert transfer.send("4", verify=False) == 0
        assert "/weight_checker" not in servers.calls(servers.urls[0])
        transfer.close()
        assert [p for _, p, _, _ in servers.log[-2:]] == ["/shutdown_weight_transfer_engine"] * 2
        assert transfer.engine.shut


def test_a_tensor_that_differs_on_one_server_stops_the_sync_naming_both():
    with Servers(2) as servers:
        transfer = servers.start()
        servers.fakes[1].corrupt = "model.layers.0.self_attn.k_proj.weight"
        with pytest.raises(WeightMismatchError) as err:
            transfer.send("1", verify=True)
        assert servers.fakes[1].url in str(err.value)
        assert "model.layers.0.self_attn.qkv_proj.weight" in str(err.value)  # vLLM's fused name
        transfer.close()


def test_a_server_that_keeps_its_old_version_or_refuses_a_route_is_named():
    with Servers(2) as servers:
        transfer = servers.start()
        servers.fakes[0].ignores_version = True
        with pytest.raises(BackendError, match=f"{servers.fakes[0].url} reports 0"):
            transfer.send("2")
        servers.fakes[0].ignores_version = False
        servers.fakes[1].fail["/start_weight_update"] = 409
        servers.log.clear()
        with pytest.raises(BackendError, match=f"{servers.fakes[1].url}/start_weight_update "
                                               "answered 409"):  # fmt: skip
            transfer.send("3")
        assert servers.calls(servers.urls[1])[-1] == "/resume"  # never left paused
        transfer.close()


def test_other_ranks_only_take_part_in_the_gathers():
    with Servers(1) as servers:
        transfer = servers.start(rank=1)
        assert transfer.send("5", verify=True) == 0
        assert servers.log == [] and transfer.engine.sends == 1
        transfer.close()
        assert servers.log == []  # rank 0 tells the servers to leave


def test_ipc_sends_no_rendezvous_fields_and_pickles_handles():
    with Servers(1) as servers:
        transfer = servers.start(method="ipc", options={"packed": True})
        (init,) = [b for _, p, b, _ in servers.log if p == "/init_weight_transfer_engine"]
        assert init == {"init_info": {"packed": False}}  # the engine's own payload, untouched
        assert transfer.engine.fields == {"rank": 0, "packed": True}
        transfer.close()
    handles = [{"GPU-1": (1, (2, 3))}]
    out = json_safe({"names": ["a"], "ipc_handles": handles})
    assert "ipc_handles" not in out
    assert pickle.loads(base64.b64decode(out["ipc_handles_pickled"])) == handles
    assert json_safe([{"names": ["a"]}]) == [{"names": ["a"]}]


def test_the_source_declares_what_it_yields_and_passes_once_for_the_metadata():
    passes = []
    state = weights()

    def gathered():
        passes.append(1)
        return iter(state.items())

    source = TransferSource(gathered, torch.float16)
    meta = source.metadata()
    assert [m.name for m in meta] == list(state) and {m.dtype for m in meta} == {torch.float16}
    assert meta[0].shape == (16, 8) and source.metadata() is meta and len(passes) == 1
    assert [t.dtype for _, t in source] == [torch.float16] * len(state) and len(passes) == 2


def test_wrong_settings_are_named():
    assert transfer_problems("rdma", {}) == [
        "actor_rollout_ref.rollout.weight_transfer is 'rdma'; choose null (the disk path) or "
        "one of nccl, ipc"]  # fmt: skip
    assert "unknown keys ['port']" in transfer_problems("nccl", {"port": 1})[0]
    rollout = {"name": "hf", "weight_transfer": "nccl"}
    assert backend_problems(rollout) == [
        "actor_rollout_ref.rollout.weight_transfer is 'nccl'; the hf backend takes null (its "
        "own path) or no other"]  # fmt: skip
    assert backend_problems({"name": "vllm", "weight_transfer": "nccl",
                             "weight_transfer_kwargs": {"port": 1}})[0].startswith(
        "actor_rollout_ref.rollout.weight_transfer_kwargs has unknown keys")  # fmt: skip
    with pytest.raises(ValueError, match="choose null"):
        VLLMBackend(["http://127.0.0.1:9"], weight_transfer="rdma")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_the_backend_refuses_a_transfer_without_gpus():
    backend = VLLMBackend(["http://127.0.0.1:9"], weight_transfer="nccl")
    assert backend.weight_sync == "transfer"
    assert VLLMBackend(["http://127.0.0.1:9"]).weight_sync == "disk"
    with pytest.raises(ValueError, match="need GPUs; on CPU set it to null"):
        backend.weight_transfer(lambda: iter(()), rank=0)
    asyncio.run(backend.aclose())


REAL_ENGINE = r"""
import json, sys, torch
from vllm.distributed.weight_transfer import nccl_engine
from agentrl.rollout.backends.vllm_transfer import VLLMWeightTransfer, vllm_trainer_init

sent = []
class Group:  # the NCCL communicator: records each broadcast
    def broadcast(self, tensor, src, stream=None):
        sent.append((src, str(tensor.dtype), list(tensor.shape)))
    def destroy(self):
        sent.append("destroyed")

nccl_engine.open_trainer_endpoint = lambda info: Group()
nccl_engine.torch.cuda.current_stream = lambda: None
g = torch.Generator().manual_seed(0)
state = {"model.embed_tokens.weight": torch.randn(16, 8, generator=g),
         "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=g)}
transfer = VLLMWeightTransfer.start("nccl", sys.argv[1:], lambda: iter(state.items()), rank=0,
                                    dtype=torch.bfloat16, options={"packed": False},
                                    trainer_init=vllm_trainer_init)
transfer.send("7")
transfer.close()
print(json.dumps({"engine": type(transfer.engine).__name__, "sent": sent}))
"""


@pytest.mark.vllm
def test_vllms_own_nccl_trainer_engine_drives_the_client(tmp_path):
    """vLLM's NCCLTrainerWeightTransferEngine (trainer_init, send_weights, shutdown) with
    this module's client and source; only the NCCL group is stubbed (no GPU)."""
    from tests.rollout.backends.test_vllm import vllm_python

    python = vllm_python()
    with Servers(2) as servers:
        servers.wire.done.set()  # the stub broadcast lands nowhere: the wire holds the same
        servers.wire.joined = threading.Semaphore(100)
        servers.wire.tensors = {k: v.to(torch.bfloat16) for k, v in weights().items()}
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run([python, "-c", REAL_ENGINE, *servers.urls], env=env, timeout=300,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["engine"] == "NCCLTrainerWeightTransferEngine"
        assert out["sent"] == [[0, "torch.bfloat16", [16, 8]], [0, "torch.bfloat16", [8, 8]],
                               "destroyed"]  # fmt: skip
        for url in servers.urls:
            assert servers.calls(url) == [
                "/init_weight_transfer_engine", "/pause?mode=keep", "/start_weight_update",
                "/update_weights", "/finish_weight_update", "/reset_prefix_cache", "/resume",
                "/weight_info", "/shutdown_weight_transfer_engine"]  # fmt: skip
        inits = {u: b["init_info"] for u, p, b, _ in servers.log
                 if p == "/init_weight_transfer_engine"}  # fmt: skip
        inits = [inits[u] for u in servers.urls]
        assert [i["rank_offset"] for i in inits] == [1, 2] and inits[0]["world_size"] == 3
        assert inits[0]["packed"] is False
        (info, *_) = [b["update_info"] for _, p, b, _ in servers.log if p == "/update_weights"]
        assert info == {"names": ["model.embed_tokens.weight",
                                  "model.layers.0.self_attn.q_proj.weight"],
                        "dtype_names": ["bfloat16", "bfloat16"], "shapes": [[16, 8], [8, 8]]}  # fmt: skip
