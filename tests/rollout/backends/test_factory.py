"""Tests for agentrl/rollout/backends/factory.py: the configured backend from the config."""

from __future__ import annotations

import asyncio
import sys

import pytest
from transformers import AutoModelForCausalLM

from agentrl.config import load_config
from agentrl.rollout.backends.base import BackendError
from agentrl.rollout.backends.factory import create_backend
from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.sglang import SGLangBackend


def rollout_config(*overrides):
    return load_config(overrides=[f"actor_rollout_ref.rollout.{o}" for o in overrides])[
        "actor_rollout_ref"
    ]["rollout"]


def test_hf_backend_from_the_model_path(tiny_model_dir, tiny_tokenizer):
    cfg = rollout_config("max_num_seqs=5", "engine_kwargs={batch_wait_s: 0.01, seed: 3}")
    backend = create_backend(cfg, str(tiny_model_dir), tiny_tokenizer)
    assert isinstance(backend, HFBackend)
    assert (backend.max_num_seqs, backend.batch_wait_s, backend.kv_cache) == (5, 0.01, "chunked")
    cfg = rollout_config("engine_kwargs={kv_cache: dynamic}")
    assert create_backend(cfg, str(tiny_model_dir), tiny_tokenizer).kv_cache == "dynamic"
    assert backend.tokenizer is tiny_tokenizer
    assert next(backend.model.parameters()).dtype.is_floating_point
    out = asyncio.run(backend.generate([1, 2, 3], {"max_new_tokens": 2}, "r"))
    assert len(out.output_ids) == 2


def test_hf_backend_shares_a_given_model(tiny_model_dir, tiny_tokenizer):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    backend = create_backend(rollout_config(), None, tiny_tokenizer, model=model)
    assert backend.model is model
    # the trainer's seed seeds the sampler unless engine_kwargs.seed is set
    assert backend._generator.initial_seed() == 0
    seeded = create_backend(rollout_config(), None, tiny_tokenizer, model=model, seed=7)
    assert seeded._generator.initial_seed() == 7
    pinned = rollout_config("engine_kwargs={seed: 3}")
    assert create_backend(pinned, None, tiny_tokenizer, model=model, seed=7)._generator.initial_seed() == 3
    with pytest.raises(ValueError, match="needs actor_rollout_ref.model.path"):
        create_backend(rollout_config(), None, tiny_tokenizer)


def test_sglang_client_on_given_urls(tiny_tokenizer):
    cfg = rollout_config(
        "name=sglang",
        "server_urls=[http://a:1,http://b:2]",
        "control_urls=[http://c:3]",
        "load_balance=round_robin",
        "request_timeout=7",
        "max_retries=1",
        "calculate_log_probs=false",
        "server_cooldown_s=5",
    )
    backend = create_backend(cfg, "/unused", tiny_tokenizer)
    assert isinstance(backend, SGLangBackend)
    assert backend.server_urls == ["http://a:1", "http://b:2"]
    assert backend.control_urls == ["http://c:3"]
    assert (backend.load_balance, backend.return_logprob) == ("round_robin", False)
    assert backend._http.timeout == 7 and backend._http.retry.max_retries == 1
    assert backend.server_cooldown_s == 5 and backend.pool.load_balance == "round_robin"


def test_unknown_backend_name_is_an_error(tiny_tokenizer):
    with pytest.raises(ValueError, match="rollout.name is 'vlm'; choose one of hf, scripted, sglang, vllm"):
        create_backend({"name": "vlm"}, "/m", tiny_tokenizer)


def test_sglang_without_urls_launches_servers_and_stops_them(tiny_model_dir, tiny_tokenizer):
    command = f"{sys.executable} -m agentrl.rollout.backends.serve_cli"
    cfg = rollout_config(
        "name=sglang",
        f"launch_command='{command}'",
        "launch_timeout=120",
        "engine_kwargs={max_num_seqs: 4}",
    )
    backend = create_backend(cfg, str(tiny_model_dir), tiny_tokenizer)
    assert isinstance(backend, SGLangBackend) and len(backend.server_urls) == 1

    async def use():
        out = await backend.generate([1, 2, 3], {"max_new_tokens": 3, "temperature": 0}, "r")
        info = await backend.get_model_info()
        await backend.aclose()
        return out, info

    out, info = asyncio.run(use())
    assert len(out.output_ids) == 3 and len(out.output_log_probs) == 3
    assert info["model_path"] == str(tiny_model_dir)
    with pytest.raises(BackendError, match="cannot connect"):  # the server is gone
        asyncio.run(backend.generate([1], {"max_new_tokens": 1}, "after"))


def test_launched_servers_listen_on_the_given_host(tiny_model_dir, tiny_tokenizer):
    from agentrl.rollout.backends.factory import server_launcher

    for name in ("sglang", "hf"):
        cfg = dict(rollout_config(f"name={name}"))
        launcher = server_launcher(cfg, str(tiny_model_dir), host="10.1.2.3")
        argv = launcher.argv(30000)
        assert argv[argv.index("--host") + 1] == "10.1.2.3", name
        assert server_launcher(cfg, str(tiny_model_dir)).host == "127.0.0.1"  # the default
    cfg = dict(rollout_config("name=hf", "engine_kwargs={kv_cache: dynamic}"))
    argv = server_launcher(cfg, str(tiny_model_dir)).argv(30000)
    assert argv[argv.index("--kv-cache") + 1] == "dynamic"  # agentrl serve's flag
