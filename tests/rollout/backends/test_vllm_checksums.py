"""Tests for agentrl/rollout/backends/vllm_checksums.py: the digests vLLM's /weight_checker
shows, from a directory and from tensors streamed one at a time."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentrl.rollout.backends.verify import WeightMismatchError
from agentrl.rollout.backends.vllm_checksums import (
    EMPTY_DIGEST,
    StreamDigests,
    compare_checksums,
    expected_checksums,
    server_checksums,
)


def _digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()


def test_expected_checksums_fuse_projections_as_vllm_loads_them(tiny_model_dir):
    tensors = load_file(next(Path(tiny_model_dir).glob("*.safetensors")))
    digests = expected_checksums(tiny_model_dir, names={"model.embed_tokens.weight"})
    prefix = "model.layers.0."
    qkv = torch.cat([tensors[prefix + f"self_attn.{p}_proj.weight"] for p in "qkv"], 0)
    assert digests[prefix + "self_attn.qkv_proj.weight"] == _digest(qkv)
    gate_up = torch.cat([tensors[prefix + f"mlp.{p}_proj.weight"] for p in ("gate", "up")], 0)
    assert digests[prefix + "mlp.gate_up_proj.weight"] == _digest(gate_up)
    assert prefix + "self_attn.q_proj.weight" not in digests
    assert "lm_head.weight" not in digests  # tied: vLLM holds the embeddings only
    norm = tensors["model.norm.weight"]
    assert digests["model.norm.weight"] == _digest(norm)
    as_bf16 = expected_checksums(tiny_model_dir, torch.bfloat16)
    assert as_bf16["model.norm.weight"] == _digest(norm.to(torch.bfloat16))


def test_server_checksums_take_rank_zero_and_see_tensor_parallelism():
    held, tp = server_checksums({"checksums": {"dp0:pp0:pcp0:tp0:a.weight": "x",
                                               "dp0:pp0:pcp0:tp1:a.weight": "y"}})
    assert held == {"a.weight": "x"} and tp
    held, tp = server_checksums({"checksums": {"dp0:pp0:pcp0:tp0:a.weight": EMPTY_DIGEST}})
    assert held == {"a.weight": EMPTY_DIGEST} and not tp



def test_streamed_digests_equal_the_directorys_in_any_order(tiny_model_dir):
    tensors = load_file(next(Path(tiny_model_dir).glob("*.safetensors")))
    want = expected_checksums(tiny_model_dir)
    names = sorted(tensors, key=lambda n: ("v_proj" not in n, "up_proj" not in n, n))  # parts late-first
    assert ".v_proj." in names[0]  # a part before the one it follows
    stream = StreamDigests()
    for name in names:
        stream.add(name, tensors[name])
    assert stream.digests == want and not stream._open


def test_compare_names_the_server_and_the_first_tensor_that_differs():
    expected = {"a.weight": "1" * 64, "b.norm.weight": "2" * 64, "c.weight": "3" * 64}
    compare_checksums("http://s", {"a.weight": "1" * 64, "b.norm.weight": "2" * 64,
                                   "c.weight": EMPTY_DIGEST}, False, expected)  # fmt: skip
    with pytest.raises(WeightMismatchError, match=r"http://s .*'c.weight' differs: SHA-256 444"):
        compare_checksums("http://s", {**expected, "c.weight": "4" * 64}, False, expected)
    with pytest.raises(WeightMismatchError, match="holds no such tensor"):
        compare_checksums("http://s", {"a.weight": "1" * 64}, False, expected)
    # tensor parallel: only the replicated norms are whole on rank 0
    compare_checksums("http://s", {"b.norm.weight": "2" * 64}, True, expected)
