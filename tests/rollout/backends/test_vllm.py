"""The vllm backend: its request and reply shapes (no server), then real vLLM servers.

The tests marked `vllm` start vLLM's CPU build from `.venv-vllm` (scripts/setup_vllm_env.sh;
another interpreter with AGENTRL_VLLM_PYTHON). Without it they skip, unless
AGENTRL_REQUIRE_VLLM=1 (CI) makes that a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.config import load_config
from agentrl.rollout.backends.registry import backend_plugin
from agentrl.rollout.backends.verify import (
    Probe,
    WeightMismatchError,
    probe_ids,
    probe_tolerance,
)
from agentrl.rollout.backends.vllm import (
    CPU_HEAD_SIZES,
    VLLMAPI,
    check_cpu_head_size,
    parse_generate_tokens,
    token_versions,
    vllm_sampling_params,
)

REPO = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- shapes, no server


def test_sampling_params_in_vllms_names():
    params = vllm_sampling_params({"max_new_tokens": 8, "temperature": 0.5, "top_k": -1,
                                   "stop_token_ids": [7], "no_stop_trim": True, "seed": 3},
                                  return_logprob=True)  # fmt: skip
    assert params == {"max_tokens": 8, "temperature": 0.5, "top_p": 1.0, "top_k": -1, "n": 1,
                      "skip_special_tokens": False, "logprobs": 0, "stop_token_ids": [7],
                      "seed": 3}  # fmt: skip
    with pytest.raises(ValueError, match="no sampling parameter\\(s\\) \\['frequency'\\]"):
        vllm_sampling_params({"max_new_tokens": 1, "frequency": 2}, True)
    payload = VLLMAPI().generate_payload([1, 2], {"max_new_tokens": 4}, "r-t0-a0", False)
    assert payload["request_id"] == "r-t0-a0" and payload["token_ids"] == [1, 2]
    assert "logprobs" not in payload["sampling_params"]


def test_a_reply_becomes_ids_log_probs_and_a_version_per_token(tiny_tokenizer):
    body = {"request_id": "generate-tokens-r1", "choices": [{
        "index": 0, "finish_reason": "stop", "stop_reason": 9, "token_ids": [5, 6, 7, 9],
        "weight_versions": [{"version": "3", "start": 0, "end": 2},
                            {"version": "4", "start": 2, "end": 4}],
        "logprobs": {"content": [{"token_id": t, "logprob": -0.5 * t} for t in (5, 6, 7, 9)]},
    }]}
    out = parse_generate_tokens(body, tiny_tokenizer)
    assert out.output_ids == [5, 6, 7, 9] and out.finish_reason == "stop"
    assert out.output_log_probs == [-2.5, -3.0, -3.5, -4.5]
    assert out.token_weight_versions == [3, 3, 4, 4] and out.weight_version == 4
    assert out.text == tiny_tokenizer.decode([5, 6, 7, 9], skip_special_tokens=False)
    assert token_versions([{"version": "default", "start": 0, "end": 3}], 3) == [-1, -1, -1]
    body["choices"][0]["finish_reason"] = "nope"
    with pytest.raises(ValueError, match="unknown finish_reason 'nope'"):
        parse_generate_tokens(body)


def test_abort_names_the_servers_id_of_the_request():
    assert VLLMAPI().abort_call("s1-t0-a0") == (
        "/abort_requests", {"request_ids": ["generate-tokens-s1-t0-a0"]})
    assert VLLMAPI().abort_call(None) == ("/abort_requests", {})
    assert VLLMAPI().parse_version({"weight_version": "default"}) is None
    assert VLLMAPI().parse_version({"weight_version": "12"}) == "12"


def test_a_head_size_the_cpu_attention_refuses_is_named(tmp_path):
    from agentrl.models.tiny import make_tiny_model

    nano = make_tiny_model(tmp_path / "nano", size="nano", seed=0)
    with pytest.raises(ValueError, match=f"model.path={nano} has attention heads of size 16"):
        check_cpu_head_size(str(nano))
    tiny = make_tiny_model(tmp_path / "tiny", size="tiny", seed=0)
    check_cpu_head_size(str(tiny))  # 32 wide: served
    assert 32 in CPU_HEAD_SIZES and 16 not in CPU_HEAD_SIZES


def _rollout(*overrides: str) -> dict:
    from omegaconf import OmegaConf

    cfg = load_config(overrides=["actor_rollout_ref.rollout.name=vllm", *overrides])
    return OmegaConf.to_container(cfg.actor_rollout_ref.rollout, resolve=True)


def test_a_wrong_server_python_is_named_before_anything_starts(tiny_model_dir):
    rollout = _rollout("actor_rollout_ref.rollout.server_python=/nowhere/python")
    with pytest.raises(ValueError, match="rollout.server_python='/nowhere/python' is not an "
                                         "interpreter that can be run"):
        backend_plugin("vllm").launcher(rollout, str(tiny_model_dir))


def test_the_launcher_runs_vllms_server_module_with_its_flags(tiny_model_dir):
    rollout = _rollout(f"actor_rollout_ref.rollout.server_python={sys.executable}",
                       "actor_rollout_ref.rollout.num_servers=2",
                       "+actor_rollout_ref.rollout.engine_kwargs.logprobs_mode=processed_logprobs")
    launcher = backend_plugin("vllm").launcher(rollout, str(tiny_model_dir), seed=5)
    argv = launcher.argv(8000)
    assert argv[:4] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model"]
    served = Path(argv[4])
    if torch.cuda.is_available():  # a GPU server updates a tied output layer in place
        assert served == tiny_model_dir
    else:  # the tiny model is tied: the CPU build's servers load an untied copy of it
        assert served != tiny_model_dir and served.name == "untied_model"
        assert json.loads((served / "config.json").read_text())["tie_word_embeddings"] is False
    flags = " ".join(argv)
    for flag in ("--enable-scale-out", "--served-model-name agentrl-policy", "--seed 5",
                 "--dtype float32", "--enforce-eager", "--logprobs-mode processed_logprobs"):
        assert flag in flags
    assert launcher.num_servers == 2 and launcher.health_path == "/health"
    assert launcher.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "--weight-transfer-config" not in argv  # the disk path needs no transfer engine
    ipc = _rollout(f"actor_rollout_ref.rollout.server_python={sys.executable}",
                   "actor_rollout_ref.rollout.weight_transfer=ipc")
    launcher = backend_plugin("vllm").launcher(ipc, str(tiny_model_dir))
    argv = launcher.argv(8000)
    assert argv[argv.index("--weight-transfer-config") + 1] == '{"backend": "ipc"}'
    assert launcher.env["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"


# ---------------------------------------------------------------- real vLLM servers

# The tests on the module's servers (`vllm_servers`) are marked xdist_group("vllm"): one
# xdist worker runs them all (--dist loadgroup), so the servers start once.


def vllm_python() -> str:
    python = os.environ.get("AGENTRL_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")
    if not Path(python).exists():
        message = f"no vLLM environment at {python} (bash scripts/setup_vllm_env.sh)"
        if os.environ.get("AGENTRL_REQUIRE_VLLM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return python


def _ports_outside_the_ephemeral_range(count: int) -> list[int]:
    """`count` distinct free TCP ports below the OS's ephemeral range, which `bind(0)` never
    hands out: the plugin's launcher picks its servers' ports with `bind(0)` while `plain`
    starts, and a port `plain` was given and had not bound yet came back to it once (its
    server then answered /health for the other's: a 404 on /update_weight_version)."""
    import random
    import socket

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports: list[int] = []
    for port in random.Random().sample(range(20000, max(20001, low)), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError(f"no {count} free ports below the ephemeral range")


@pytest.fixture(scope="module")
def vllm_servers(varied_model_dir, tiny_model_dir):
    """The module's real vLLM servers, started at once (a CPU server takes tens of seconds
    to start, mostly imports; started together they share that wait), every test of the
    module on them:

    - `both`: two servers of the varied (tied) tiny model, launched by the plugin as a run
      launches them (on CPU on an untied copy, untie.py), and its client of both. The
      failover test kills the second; every other test talks to the first alone through
      `first` (a client of it) and leaves it holding the weights it was launched with.
    - `plain`: a server of the tiny model started without --enable-scale-out (the refusal
      test's).
    - `spares`: two more servers of the varied model, launched by the plugin; each async
      training test (engine path, agent mode) runs on the first server and its own spare,
      and kills the spare mid-run."""
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import ExitStack

    from agentrl.rollout.backends.launcher import ServerLauncher

    python = vllm_python()
    rollout = _rollout(f"actor_rollout_ref.rollout.server_python={python}",
                       "actor_rollout_ref.rollout.num_servers=2",
                       "actor_rollout_ref.rollout.launch_timeout=400",
                       "actor_rollout_ref.rollout.request_timeout=120",
                       "actor_rollout_ref.rollout.server_cooldown_s=600",
                       "actor_rollout_ref.rollout.max_model_len=4096")
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    plain_port, *spare_ports = _ports_outside_the_ephemeral_range(3)
    plain = ServerLauncher(tiny_model_dir, 1, ports=[plain_port],
        command=[python, "-m", "vllm.entrypoints.openai.api_server"], model_flag="--model",
        health_path="/health", ready_timeout=400,
        server_args={"dtype": "float32", "enforce_eager": True, "max_model_len": 512},
        env={"VLLM_CPU_KVCACHE_SPACE": "1"})  # fmt: skip
    spares = backend_plugin("vllm").launcher(rollout, str(varied_model_dir))
    spares.ports = spare_ports  # not bind(0)'s: `both`'s launcher picks its ports meanwhile
    spares.server_args["enable_server_load_tracking"] = True  # /load: its calls in flight
    with ThreadPoolExecutor(2) as pool, ExitStack() as stack:  # a failure stops all at once
        stack.callback(plain.stop)
        stack.callback(spares.stop)
        plain_ready, spares_ready = pool.submit(plain.start), pool.submit(spares.start)
        both = backend_plugin("vllm").create(rollout, str(varied_model_dir), tokenizer)
        stack.callback(lambda: asyncio.run(both.aclose()))
        plain_ready.result()
        spares_ready.result()
        first = backend_plugin("vllm").client(rollout, both.server_urls[:1], tokenizer)
        stack.callback(lambda: asyncio.run(first.aclose()))
        yield SimpleNamespace(first=first, both=both, rollout=rollout, plain=plain,
                              spares=spares)


@pytest.fixture
def vllm_server(vllm_servers):
    """A client of one vLLM server of the varied tiny model: (its backend, the rollout
    config)."""
    return vllm_servers.first, vllm_servers.rollout


def _prompts(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(t) for t in ("1+2=", "hello there world, how are you",
                                          "the of and to in is it that for you")]


@pytest.mark.vllm
@pytest.mark.xdist_group("vllm")
def test_greedy_ids_and_log_probs_equal_the_hf_engine(vllm_server, varied_model_dir):
    from agentrl.rollout.backends.hf import HFBackend

    backend, _ = vllm_server
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    engine = HFBackend.from_pretrained(varied_model_dir)
    params = {"max_new_tokens": 24, "temperature": 0.0, "ignore_eos": True}

    async def both(prompt, i):
        served = await backend.generate(prompt, dict(params), f"greedy{i}-t0-a0")
        local = await engine.generate(prompt, dict(params), f"greedy{i}")
        return served, local

    async def run():
        outs = await asyncio.gather(*(both(p, i) for i, p in enumerate(_prompts(tokenizer))))
        await engine.aclose()
        return outs

    for served, local in asyncio.run(run()):
        assert served.output_ids == local.output_ids
        assert len(set(served.output_ids)) > 1  # the varied model: a test that can fail
        diff = max(abs(a - b) for a, b in zip(served.output_log_probs, local.output_log_probs,
                                              strict=True))  # fmt: skip
        assert diff < 1e-4
        # one version for every token: 0 as launched, or a later one when another test of
        # this module synced weights first (the tests run in any order)
        versions = served.token_weight_versions
        assert served.finish_reason == "length" and len(versions) == 24
        assert len(set(versions)) == 1 and versions[0] >= 0


def _probe(model) -> Probe:
    ids = probe_ids(model.config.vocab_size)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1]
    chosen = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids[1:])[:, None])
    return Probe(ids, chosen[:, 0].tolist(), probe_tolerance(None))


@pytest.mark.vllm
@pytest.mark.xdist_group("vllm")
def test_a_stale_tied_output_layer_is_caught_by_the_probe(vllm_server, varied_model_dir,
                                                           tmp_path):  # fmt: skip
    """vLLM 0.32's CPU build prepacks the output layer; reloading the embeddings does not
    refresh it. The fixture's tied model is served untied (untie.py), so a directory without
    lm_head.weight (the tied model as save_pretrained writes it) leaves the output layer as
    it was: the stale layer a tied server would keep. No checksum shows it on CPU (the layer
    is prepacked); the probe's log-probs do."""
    backend, _ = vllm_server
    trained = AutoModelForCausalLM.from_pretrained(varied_model_dir)
    with torch.no_grad():
        trained.model.embed_tokens.weight.add_(0.05 * torch.randn_like(
            trained.model.embed_tokens.weight))
    trained.save_pretrained(tmp_path / "step_1")

    async def run():
        await backend.update_weights(str(tmp_path / "step_1"), weight_version="1")
        try:
            checksums_only = await backend.verify_weights(str(tmp_path / "step_1"))
            with pytest.raises(WeightMismatchError) as err:
                await backend.verify_weights(str(tmp_path / "step_1"), _probe(trained))
        finally:  # as it was launched, for the module's other tests
            await backend.update_weights(str(varied_model_dir), weight_version="2")
        return checksums_only, str(err.value)

    checksums_only, message = asyncio.run(run())
    assert checksums_only == 1
    assert backend.server_urls[0] in message
    assert "log-probs of the probe sequence differ from the trainer's" in message


@pytest.mark.vllm
@pytest.mark.xdist_group("vllm")
def test_weights_sync_from_disk_are_verified_and_a_corrupt_server_is_named(
        vllm_server, varied_model_dir, tmp_path):  # fmt: skip
    """An untied model trained from the one the server was launched with (its untied copy,
    lm_head.weight included) is synced, verified with the probe and sampled from; then the
    server loads other weights behind the client's back and verification names it."""
    from agentrl.rollout.backends.untie import write_untied_copy

    backend, _ = vllm_server
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    as_served = write_untied_copy(varied_model_dir, tmp_path / "as_served")
    trained = AutoModelForCausalLM.from_pretrained(as_served)
    assert not trained.config.tie_word_embeddings
    generator = torch.Generator().manual_seed(0)  # the same trained weights in any test order
    with torch.no_grad():
        for param in trained.parameters():  # the output layer apart from the embeddings
            param.add_(0.01 * torch.randn(param.shape, generator=generator))
    good = tmp_path / "step_1"
    trained.save_pretrained(good)
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    [shard] = sorted(bad.glob("*.safetensors"))
    tensors = load_file(shard)
    assert "lm_head.weight" in tensors
    tensors["model.layers.1.post_attention_layernorm.weight"][2] += 0.5
    save_file(tensors, shard, metadata={"format": "pt"})
    url = backend.server_urls[0]
    prompt = _prompts(tokenizer)[1]

    async def run():
        await backend.update_weights(str(good), weight_version="1")
        try:
            verified = await backend.verify_weights(str(good), _probe(trained))
            out = await backend.generate(prompt, {"max_new_tokens": 8, "temperature": 0.0,
                                                  "ignore_eos": True}, "sync1-t0-a0")  # fmt: skip
            # the server loads other weights behind the client's back
            await backend.api.load_directory(backend._post_control, url, str(bad), "1", True)
            with pytest.raises(WeightMismatchError) as err:
                await backend.verify_weights(str(good), _probe(trained))
        finally:  # as it was launched (the output layer too), for the module's other tests
            await backend.update_weights(str(as_served), weight_version="2")
        return verified, out, str(err.value)

    verified, out, message = asyncio.run(run())
    assert verified == 1 and out.token_weight_versions == [1] * 8
    # the served log-probs are the trained model's, not the original's
    original = AutoModelForCausalLM.from_pretrained(varied_model_dir)
    ids = torch.tensor([prompt + out.output_ids])
    for model, close in ((trained, True), (original, False)):
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits.float(), -1).gather(
            1, torch.tensor(out.output_ids)[:, None])[:, 0]
        diff = (expected - torch.tensor(out.output_log_probs)).abs().max().item()
        assert (diff < 1e-4) == close, diff
    assert url in message and "model.layers.1.post_attention_layernorm.weight" in message


@pytest.mark.vllm
@pytest.mark.xdist_group("vllm")
def test_abort_ends_a_generation(vllm_server, varied_model_dir):
    """A warm server writes thousands of the tiny model's tokens in well under a second, so
    the request is held first: while the server is paused (mode keep) it is queued, not run;
    the abort (repeated: one before the request arrives is a no-op) ends it there."""
    backend, _ = vllm_server
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    url = backend.server_urls[0]

    async def run():
        await backend._post_control(url, "/pause?mode=keep", {})
        try:
            task = asyncio.create_task(backend.generate(
                _prompts(tokenizer)[0], {"max_new_tokens": 3000, "temperature": 1.0,
                                         "ignore_eos": True}, "long-t0-a0"))  # fmt: skip
            for _ in range(15):
                await asyncio.sleep(0.2)
                await backend.abort("long-t0-a0")
        finally:
            await backend._post_control(url, "/resume", {})
        return await asyncio.wait_for(task, 60)

    out = asyncio.run(run())
    assert out.finish_reason == "abort" and len(out.output_ids) < 3000  # ended, not finished


@pytest.mark.vllm
@pytest.mark.xdist_group("vllm")
def test_a_server_killed_mid_batch_every_trajectory_completes_on_the_other(vllm_servers,
                                                                         varied_model_dir):  # fmt: skip
    """Two launched servers, a batch spread over both; the second is paused first, so its
    share of the batch is surely in flight on it (queued, not finished) when it is killed,
    and every one of them is resent to the first and completes there."""
    both = vllm_servers.both
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    prompts = _prompts(tokenizer) * 4
    victim = both.server_urls[1]
    launcher = both._on_close.__self__  # the ServerLauncher that started them

    async def run():
        await both._post_control(victim, "/pause?mode=keep", {})
        calls = [asyncio.create_task(both.generate(
            p, {"max_new_tokens": 200, "temperature": 1.0, "ignore_eos": True},
            f"batch{i}-t0-a0")) for i, p in enumerate(prompts)]  # fmt: skip
        await asyncio.sleep(1.5)
        sent_to_victim = both.in_flight[victim]
        [server] = [s for s in launcher.servers if s.url == victim]
        os.killpg(server.process.pid, signal.SIGKILL)
        return sent_to_victim, await asyncio.wait_for(asyncio.gather(*calls), 300)

    sent_to_victim, outs = asyncio.run(run())
    metrics = both.metrics()
    assert sent_to_victim == 6  # least loaded: half the batch on each server
    assert len(outs) == 12 and all(len(o.output_ids) == 200 for o in outs)
    assert all(o.meta_info["server_url"] != victim for o in outs)
    assert metrics["rollout/server_retries"] == 6
    assert metrics["rollout/servers_lost"] == 1 and metrics["rollout/servers_alive"] == 1


@pytest.mark.vllm
def test_a_server_that_never_becomes_ready_is_named(tiny_model_dir):
    python = vllm_python()
    # a "server" that listens nowhere: the launcher gives up at launch_timeout, nothing hangs
    rollout = _rollout(f"actor_rollout_ref.rollout.server_python={python}",
                       f"actor_rollout_ref.rollout.launch_command='{python} -c "
                       "\"import time; time.sleep(600)\"'",
                       "actor_rollout_ref.rollout.launch_timeout=3")
    with pytest.raises(RuntimeError, match="servers not ready after 3s "
                                           "\\(actor_rollout_ref.rollout.launch_timeout\\)"):
        backend_plugin("vllm").create(rollout, str(tiny_model_dir), None)


@pytest.mark.vllm
@pytest.mark.xdist_group("vllm")
def test_a_server_without_scale_out_is_refused_with_the_fix(vllm_servers, tiny_model_dir):
    plain = vllm_servers.plain  # vLLM's server as its docs start it: no --enable-scale-out
    try:
        rollout = _rollout(f"actor_rollout_ref.rollout.server_urls=[{plain.urls[0]}]")
        with pytest.raises(ValueError, match="answers 403 on /inference/v1/generate .*start it "
                                             "with --enable-scale-out"):
            backend_plugin("vllm").create(rollout, str(tiny_model_dir), None)
    finally:
        plain.stop()  # no other test needs it


class _Recording:
    """The vLLM backend, with every output's ids kept (what the policy produced)."""

    def __init__(self, backend):
        self.backend, self.outputs = backend, []

    async def generate(self, input_ids, sampling_params, request_id):
        out = await self.backend.generate(input_ids, sampling_params, request_id)
        self.outputs.append(list(out.output_ids))
        return out

    def __getattr__(self, name):
        return getattr(self.backend, name)


@pytest.mark.vllm
@pytest.mark.xdist_group("vllm")
def test_the_gateway_records_vllms_tokens_exactly(vllm_server, varied_model_dir):
    import httpx

    from agentrl.gateway import create_app
    from agentrl.utils.serving import serve_in_thread

    backend, _ = vllm_server
    tokenizer = AutoTokenizer.from_pretrained(varied_model_dir)
    recording = _Recording(backend)
    app = create_app(recording, tokenizer, model_name="policy")
    with serve_in_thread(app) as url:
        base = f"{url}/sessions/ep-vllm/v1/chat/completions"
        messages = [{"role": "user", "content": "What is 6*7?"}]
        first = httpx.post(base, json={"model": "policy", "messages": messages,
                                       "max_tokens": 12, "temperature": 0}, timeout=120)
        first.raise_for_status()
        messages += [first.json()["choices"][0]["message"],
                     {"role": "user", "content": "And 6*8?"}]
        httpx.post(base, json={"model": "policy", "messages": messages, "max_tokens": 12,
                               "temperature": 0}, timeout=120).raise_for_status()
        recorded = httpx.get(f"{url}/sessions/ep-vllm", timeout=30).json()
    assert recorded["rewrites"] == 0 and len(recording.outputs) == 2
    (trajectory,) = recorded["trajectories"]
    trained = [t for t, m in zip(trajectory["token_ids"], trajectory["loss_mask"], strict=True)
               if m == 1]
    assert trained == recording.outputs[0] + recording.outputs[1]


MULTI_CALL_AGENT = REPO / "tests" / "fixtures" / "multi_call_agent.py"


def _kill_once_busy(server, after: Path, killed: list[str], deadline_s: float = 600) -> None:
    """SIGKILL launched `server`'s process group once `after` exists and the server holds a
    generation call (its `/load`, with --enable-server-load-tracking), so that one is in
    flight there when it dies; its URL goes into `killed`."""
    import time

    import httpx

    deadline = time.monotonic() + deadline_s
    with httpx.Client(timeout=5) as client:
        while time.monotonic() < deadline:
            try:
                busy = after.exists() and client.get(f"{server.url}/load").json()[
                    "server_load"] > 0  # fmt: skip
            except (httpx.HTTPError, ValueError, KeyError):  # a slow answer: poll again
                busy = False
            if busy:
                os.killpg(server.process.pid, signal.SIGKILL)
                killed.append(server.url)
                return
            time.sleep(0.02)


@pytest.mark.vllm
@pytest.mark.xdist_group("vllm")
@pytest.mark.parametrize("agent", [False, True], ids=["engine", "agent_mode"])
def test_async_training_on_vllm_verifies_every_sync_versions_every_token_and_fails_over(
        agent, vllm_servers, varied_model_dir, make_config, tmp_path):  # fmt: skip
    """trainer.mode=async against two vLLM servers (the module's first and this test's spare,
    given as server_urls; the trainer's model is the untied copy they serve): the engine's
    multi-turn path, and agent mode with episodes of three calls and pauses. Every sync
    reaches the servers while they may hold requests (pause with requests kept, resume) and
    is verified; every trained token carries the version the server reported, never staler
    than the bound. Once step 1 has trained, the spare is SIGKILLed while it holds a
    generation call (the producer's, or a sync's probe): the producer's calls there are
    resent whole to the first server, every step still trains every trajectory (in agent
    mode every episode finishes), the later syncs skip the dead server and verify the
    survivor, and the steps count the lost server. Seen here: verified [2, 1, 1], 2 calls
    resent, 1 server lost, on both paths."""
    import threading

    from agentrl.rollout.backends.untie import write_untied_copy
    from agentrl.trainer import run_train

    as_served = write_untied_copy(varied_model_dir, tmp_path / "as_served")
    first = vllm_servers.first
    victim = vllm_servers.spares.servers[int(agent)]  # each run kills its own spare
    overrides = [
        f"actor_rollout_ref.model.path={as_served}", "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.server_urls=[{first.server_urls[0]},{victim.url}]",
        "actor_rollout_ref.rollout.request_timeout=120", "trainer.mode=async",
        "off_policy.max_staleness=1", "trainer.total_training_steps=3", "data.shuffle=false",
        f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
    ]  # fmt: skip
    if agent:
        overrides += [f"actor_rollout_ref.rollout.agent_function={MULTI_CALL_AGENT}:run",
                      "actor_rollout_ref.rollout.agent_timeout=120",
                      "actor_rollout_ref.rollout.multi_turn.enable=false",
                      "data.max_response_length=64"]  # fmt: skip
    # the policy before training is version 0 (another test of the module may have synced
    # the server to other versions since its launch; the spare was launched at 0)
    asyncio.run(first.update_weights(str(as_served), weight_version="0"))
    killed: list[str] = []
    killer = threading.Thread(target=_kill_once_busy, daemon=True,
                              args=(victim, tmp_path / "rollouts" / "1.jsonl", killed))
    killer.start()
    try:
        history = run_train(make_config(*overrides))
    finally:  # as it was launched, for the module's other tests
        asyncio.run(first.update_weights(str(as_served), weight_version="0"))
        killer.join(timeout=5)
    assert killed == [victim.url], "the spare never held a request after step 1"
    assert [m["training/global_step"] for m in history] == [1.0, 2.0, 3.0]
    # every sync verified: on both servers before the kill, on the survivor after it (the
    # kill may land in sync 1, between its update and its probe)
    verified = [m["rollout/weights_verified"] for m in history]
    assert verified[-1] == 1 and min(verified) >= 1, verified
    assert all(m["rollout/canary/drained"] == 0 for m in history)  # the canary: no alarm
    assert all(m.get("rollout/agent_errors", 0) == 0 for m in history)
    # the dead server, counted by the producer's client as the sync mode's rollout counts it
    assert sum(m.get("rollout/servers_lost", 0) for m in history) == 1
    assert sum(m.get("rollout/server_retries", 0) for m in history) >= 1  # its call resent
    assert history[-1]["rollout/servers_alive"] == 1
    rows = [json.loads(line) for step in (1, 2, 3)
            for line in (tmp_path / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
    # 2 prompts x 2 samples a step: every trajectory trained, every prompt once
    assert Counter(row["uid"] for row in rows) == {f"{b}-{i}": 2 for b in (1, 2, 3)
                                                   for i in range(2)}  # fmt: skip
    assert all(row["response_ids"] for row in rows)
    assert all(row["policy_versions"] for row in rows)  # the server's versions, every token
    assert all(0 <= row["step"] - 1 - min(row["policy_versions"]) <= 1 for row in rows)
    assert max(max(row["policy_versions"]) for row in rows) >= 1  # synced weights served


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.xdist_group("vllm")
def test_a_clean_25_step_sync_run_on_vllm_drains_nothing(vllm_servers, varied_model_dir,
                                                          make_config, tmp_path):  # fmt: skip
    """The canary's false-alarm check on vLLM (issue 55): 25 sync-mode GRPO steps against the
    module's first vLLM CPU server (the trainer's model the untied copy it serves), every sync
    verified and followed by the canary (prompt log-probs and vLLM's top-k); none drains it,
    whatever the gap between vLLM's CPU kernels and the trainer's forward. With
    AGENTRL_RECORD_CANARY=<a .json path> the run's canary values are written there
    (bench/results/canary_clean_vllm_cpu_2026-12-07.json is one such run)."""
    from agentrl.rollout.backends.untie import write_untied_copy
    from agentrl.trainer import run_train

    as_served = write_untied_copy(varied_model_dir, tmp_path / "as_served")
    first = vllm_servers.first
    asyncio.run(first.update_weights(str(as_served), weight_version="0"))
    try:
        history = run_train(make_config(
            f"actor_rollout_ref.model.path={as_served}", "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.server_urls=[{first.server_urls[0]}]",
            "actor_rollout_ref.rollout.request_timeout=120", "trainer.total_epochs=100",
            "trainer.total_training_steps=25", "trainer.logger=[file]",
        ))  # fmt: skip
    finally:  # as it was launched, for the module's other tests
        asyncio.run(first.update_weights(str(as_served), weight_version="0"))
    assert len(history) == 25
    assert all(m["rollout/weights_verified"] == 1 for m in history)
    assert sum(m["rollout/canary/drained"] for m in history) == 0
    gaps = [m["rollout/canary/logprob_gap_max"] for m in history]
    threshold = history[0]["rollout/canary/threshold"]
    assert max(gaps) < threshold, (gaps, threshold)
    assert all("rollout/canary/kl_topk" in m for m in history)  # vLLM gives its top-k
    if os.environ.get("AGENTRL_RECORD_CANARY"):
        record = {"what": "clean 25-step sync GRPO run on one vLLM CPU server (tests/rollout/"
                          "backends/test_vllm.py): the canary after every sync",
                  "threshold": threshold, "logprob_gap_max": gaps,
                  "logprob_gap_mean": [m["rollout/canary/logprob_gap_mean"] for m in history],
                  "kl_topk": [m["rollout/canary/kl_topk"] for m in history],
                  "drained": sum(m["rollout/canary/drained"] for m in history),
                  "canary_s": [m["timing/canary_s"] for m in history],
                  "step_s": [m["timing_s/step"] for m in history]}  # fmt: skip
        Path(os.environ["AGENTRL_RECORD_CANARY"]).write_text(json.dumps(record, indent=1) + "\n")
