"""Sharded weight sync: the FSDP2 shards of two gloo ranks stream, bucket by bucket, into
each rank's hf engine; the engine ends with the actor's weights and no rank ever held more
than one bucket of gathered weights. The same buckets written as safetensors shards (the
directory SGLang servers load) hold the actor's weights too, and an `agentrl serve` server
that loads them through the SGLang client holds them exactly."""

from __future__ import annotations

import asyncio
import json

import httpx
import torch
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM

from agentrl.testing.workers import bucketed_sync_rank

BUCKET = 64 * 1024  # bytes: far below the model, so the sync takes many buckets


def test_two_rank_bucketed_sync_is_exact_and_bounded(tiny_model_dir, tmp_path):
    mp.spawn(
        bucketed_sync_rank,
        args=(2, str(tmp_path / "store"), str(tiny_model_dir), BUCKET, str(tmp_path)),
        nprocs=2,
        join=True,
    )
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for result in results:
        assert result["equal"]  # the engine's weights are the actor's, on every rank
        assert result["tied"]  # the engine's tied head follows its embedding
        # the tied head is sent once, under the embedding's name
        assert "lm_head.weight" not in result["names"]
        assert len(result["names"]) == len(set(result["names"])) == result["n_expected"] - 1
        # bounded: every bucket within max(bucket size, largest tensor), many buckets ...
        assert len(result["sizes"]) > 5
        assert max(result["sizes"]) <= max(BUCKET, result["largest"])
        assert max(result["sizes"]) < sum(result["sizes"]) / 3  # ... never the whole model
        # ... and when a bucket arrives, none of the earlier ones is still held
        assert result["alive"] == [0] * len(result["sizes"])
    assert results[0]["names"] == results[1]["names"]  # the same order on both ranks
    # the directory SGLang servers load: one shard per bucket, the actor's weights exactly
    assert results[0]["export_equal"]
    assert results[0]["export_shards"] == len(results[0]["sizes"])


def test_two_rank_sync_reaches_an_agentrl_serve_server(tiny_model_dir, tmp_path):
    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.rollout.backends.serve import create_app
    from agentrl.utils.serving import serve_in_thread

    served = HFBackend.from_pretrained(tiny_model_dir, device="cpu")
    before = {k: v.clone() for k, v in served.model.state_dict().items()}
    try:
        with serve_in_thread(create_app(served, model_path=str(tiny_model_dir)),
                             startup_timeout=60) as url:
            mp.spawn(
                bucketed_sync_rank,
                args=(2, str(tmp_path / "store"), str(tiny_model_dir), BUCKET, str(tmp_path),
                      url),
                nprocs=2,
                join=True,
            )
            version = httpx.get(f"{url}/get_weight_version", timeout=10).json()
    finally:
        asyncio.run(served.aclose())
    assert version["weight_version"] == "1"
    # the server's engine holds the actor's changed weights, every tensor exactly (the
    # export equals the actor's gathered weights, checked on rank 0)
    assert json.loads((tmp_path / "rank0.json").read_text())["export_equal"]
    actor = AutoModelForCausalLM.from_pretrained(tmp_path / "export").state_dict()
    got = served.model.state_dict()
    assert all(torch.equal(got[k], v) for k, v in actor.items())
    assert not torch.equal(before["model.embed_tokens.weight"], got["model.embed_tokens.weight"])
