"""Weights verified after a sync: the hf engine's tensors, a server's answers."""

from __future__ import annotations

import asyncio
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.sglang import SGLangBackend
from agentrl.rollout.backends.verify import (
    VERIFY_ROWS,
    WeightMismatchError,
    first_prefix_mismatch,
    iter_directory_tensors,
    prefix_values,
    verify_after_sync,
)


def test_which_syncs_are_verified():
    assert [verify_after_sync("every_sync", n) for n in (1, 2, 3)] == [True, True, True]
    assert [verify_after_sync("first_sync", n) for n in (1, 2, 3)] == [True, False, False]
    assert [verify_after_sync("off", n) for n in (1, 2)] == [False, False]
    with pytest.raises(ValueError, match="verify_weights is 'always'; choose one of "
                                         "every_sync, first_sync, off"):
        verify_after_sync("always", 1)


def test_prefix_values_take_rows_and_cast():
    tensor = torch.arange(12, dtype=torch.float32).reshape(6, 2) / 3
    assert prefix_values(tensor, rows=2) == pytest.approx([0, 1 / 3, 2 / 3, 1])
    as_bf16 = prefix_values(tensor, rows=2, dtype=torch.bfloat16)
    assert as_bf16 == [float(v) for v in tensor[:2].to(torch.bfloat16).float().reshape(-1)]
    assert as_bf16 != prefix_values(tensor, rows=2)  # bf16 rounds 1/3
    assert first_prefix_mismatch([1.0, 2.0], [[1.0], [2.0]]) is None
    assert first_prefix_mismatch([1.0, 2.0], [1.0, 2.5]) == "value 1 is 2.5, expected 2.0"
    assert "answered 1 values" in first_prefix_mismatch([1.0, 2.0], [1.0])


def test_the_hf_engine_verifies_what_it_was_sent(varied_model_dir):
    backend = HFBackend.from_pretrained(varied_model_dir)
    state = {k: v.clone() + 0.5 for k, v in backend.model.state_dict().items()}

    async def sync(bucket):
        await backend.update_weights(bucket, weight_version="1")
        return await backend.verify_weights(bucket)

    assert asyncio.run(sync(state)) == 1
    with torch.no_grad():  # an engine that holds something else for one tensor
        backend.model.model.norm.weight[3] += 1e-3
    with pytest.raises(WeightMismatchError, match="tensor 'model.norm.weight' differs"):
        asyncio.run(backend.verify_weights(state))
    asyncio.run(backend.aclose())


def _write_perturbed(source_dir, out_dir, delta):
    model = AutoModelForCausalLM.from_pretrained(source_dir)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(delta)
    model.save_pretrained(out_dir)
    return out_dir


def test_a_server_is_verified_and_a_corrupted_one_is_named(served, tmp_path, varied_model_dir):
    url, engine = served
    good = _write_perturbed(varied_model_dir, tmp_path / "good", 0.01)
    # the same weights but one tensor changed in one value: what a bad load would leave
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    [shard] = sorted(bad.glob("*.safetensors"))
    tensors = load_file(shard)
    tensors["model.layers.0.mlp.up_proj.weight"][1, 0] += 0.25
    save_file(tensors, shard, metadata={"format": "pt"})

    async def run():
        client = SGLangBackend([url], request_timeout=30)
        try:
            await client.update_weights(str(good), weight_version="7")
            verified = await client.verify_weights(str(good))
            await client.update_weights(str(bad), weight_version="8")
            with pytest.raises(WeightMismatchError) as err:
                await client.verify_weights(str(good))
            return verified, str(err.value)
        finally:
            await client.aclose()

    verified, message = asyncio.run(run())
    assert verified == 1
    assert url in message and "'model.layers.0.mlp.up_proj.weight' differs" in message
    assert f"value {engine.model.config.hidden_size}" in message  # row 1, column 0


def test_directory_tensors_are_every_tensor_written(tmp_path, varied_model_dir):
    out = _write_perturbed(varied_model_dir, tmp_path / "w", 0.0)
    names = [name for name, _ in iter_directory_tensors(out)]
    model = AutoModelForCausalLM.from_pretrained(varied_model_dir)
    assert set(names) <= set(model.state_dict()) and len(names) >= len(
        dict(model.named_parameters()))
    assert VERIFY_ROWS >= 1
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors files"):
        list(iter_directory_tensors(tmp_path))
