"""Model loading, FSDP2 sharding on a mesh, and gathering the full weights back."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from torch.distributed.fsdp import FSDPModule
from transformers import AutoModelForCausalLM

from agentrl.distributed import InProcessWorkerGroup, WorkerSpec
from agentrl.distributed.testing import EchoWorker
from agentrl.workers.fsdp import (
    decoder_layers,
    device_mesh,
    full_state_dict,
    load_model,
    mixed_precision_policy,
    shard_model,
    to_dtype,
)


@pytest.fixture
def process_group():
    """This process as a group of one (what InProcessWorkerGroup sets up)."""
    with InProcessWorkerGroup(WorkerSpec(EchoWorker)):
        yield


def _model_cfg(path, **overrides):
    base = {
        "path": None if path is None else str(path),
        "external_lib": None,
        "trust_remote_code": False,
        "override_config": {},
        "enable_gradient_checkpointing": False,
    }
    return OmegaConf.create({**base, **overrides})


def test_dtypes_by_name():
    assert to_dtype("bf16") is torch.bfloat16 and to_dtype("float32") is torch.float32
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        to_dtype("fp8")


def test_load_model_applies_overrides_and_checkpointing(tiny_model_dir):
    model = load_model(
        _model_cfg(
            tiny_model_dir,
            override_config={"attention_dropout": 0.25},
            enable_gradient_checkpointing=True,
        ),
        AutoModelForCausalLM,
    )
    assert model.config.attention_dropout == 0.25
    # transformers 5.24 names it is_activation_checkpointing, earlier releases is_gradient_...
    assert getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing
    with pytest.raises(ValueError, match="override_config.no_such_field: the model config has no"):
        load_model(
            _model_cfg(tiny_model_dir, override_config={"no_such_field": 1}), AutoModelForCausalLM
        )
    with pytest.raises(ValueError, match="the model path is not set"):
        load_model(_model_cfg(None), AutoModelForCausalLM)


def test_decoder_layers_come_from_no_split_modules(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert [type(m).__name__ for m in decoder_layers(model)] == ["Qwen2DecoderLayer"] * 3
    with pytest.raises(ValueError, match="Linear lists no decoder layer class"):
        decoder_layers(torch.nn.Linear(2, 2))


def test_sharded_model_computes_like_the_original_and_gathers_back(process_group, tiny_model_dir):
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    mesh = device_mesh(1, torch.device("cpu"))
    assert mesh.mesh_dim_names == ("fsdp",)
    shard_model(model, mesh, mixed_precision_policy({}, torch.device("cpu")))
    assert isinstance(model, FSDPModule)
    assert all(isinstance(layer, FSDPModule) for layer in decoder_layers(model))
    ids = torch.tensor([[5, 9, 200, 31, 7]])
    torch.testing.assert_close(
        model(input_ids=ids).logits, original(input_ids=ids).logits, atol=0, rtol=0
    )
    weights = full_state_dict(model)
    expected = original.state_dict()
    assert sorted(weights) == sorted(expected)
    assert all(torch.equal(weights[k], expected[k]) for k in expected)
    assert sorted(full_state_dict(model, rank0_only=True)) == sorted(expected)


def test_mesh_shapes(process_group):
    with pytest.raises(ValueError, match="fsdp_config.fsdp_size \\(0\\) must be -1 or divide"):
        device_mesh(1, torch.device("cpu"), fsdp_size=0)
    assert device_mesh(1, torch.device("cpu"), fsdp_size=4).mesh_dim_names == ("fsdp",)


def test_mixed_precision_only_on_gpu():
    from agentrl.config import load_config

    cfg = load_config(overrides=["actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=bf16"])
    for fsdp_cfg in (cfg.actor_rollout_ref.actor.fsdp_config, cfg.actor_rollout_ref.ref.fsdp_config):
        assert mixed_precision_policy(fsdp_cfg, torch.device("cpu")) is None
        policy = mixed_precision_policy(fsdp_cfg, torch.device("cuda"))
        assert policy.param_dtype is torch.bfloat16 and policy.reduce_dtype is torch.bfloat16
    critic = mixed_precision_policy(cfg.critic.model.fsdp_config, torch.device("cuda"))
    assert critic.param_dtype is torch.bfloat16 and critic.reduce_dtype is torch.float32
