"""Load a Hugging Face model and shard it with FSDP2; gather its full weights back.

    mesh = device_mesh(world_size, device, fsdp_size=-1)
    model = load_model(model_cfg, AutoModelForCausalLM, device, dtype="fp32")
    shard_model(model, mesh, mixed_precision_policy(fsdp_cfg, device), reshard_after_forward=True)
    weights = full_state_dict(model)          # every rank gets the full tensors (on CPU)

FSDP2 (``torch.distributed.fsdp.fully_shard``) shards every decoder layer (the classes the
model lists in ``_no_split_modules``), then the root, on a 1-D mesh (``fsdp_size`` -1 or
the world size) or a 2-D ``(replicate, shard)`` mesh for hybrid sharding. Mixed precision
(bf16 compute, fp32 reduction) is used on GPU only: CPU kernels compute in fp32, which also
makes CPU runs match a single-process reference. FSDP1 is not used: its full state dict
with CPU offload segfaults on CPU (see docs/workers.md).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from transformers import AutoConfig

from agentrl.distributed.process_group import rank, world_size

logger = logging.getLogger(__name__)

DTYPES = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float16": torch.float16,
}


def to_dtype(name: str) -> torch.dtype:
    """A dtype from its config name (fp32 | bf16 | fp16 and the torch spellings)."""
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; valid: {', '.join(DTYPES)}")
    return DTYPES[name]


def device_mesh(world_size: int, device: torch.device, fsdp_size: int = -1) -> DeviceMesh:
    """A 1-D ``("fsdp",)`` mesh, or ``("ddp", "fsdp")`` when ``fsdp_size`` divides the
    world into several shard groups (hybrid sharding: replicate across, shard within)."""
    if fsdp_size in (-1, world_size) or fsdp_size > world_size:
        return init_device_mesh(device.type, (world_size,), mesh_dim_names=("fsdp",))
    if fsdp_size < 1 or world_size % fsdp_size:
        raise ValueError(
            f"fsdp_config.fsdp_size ({fsdp_size}) must be -1 or divide the {world_size} ranks"
        )
    return init_device_mesh(
        device.type, (world_size // fsdp_size, fsdp_size), mesh_dim_names=("ddp", "fsdp")
    )


def load_model(
    model_cfg: Any, auto_cls: Any, dtype: str = "fp32", config_fields: dict[str, Any] | None = None
) -> torch.nn.Module:
    """``auto_cls.from_pretrained(model_cfg.path)`` on the CPU with the config's
    ``override_config``, ``external_lib``, ``trust_remote_code`` and gradient checkpointing;
    ``config_fields`` (e.g. ``num_labels`` of a value model) are set on the HF config too."""
    if model_cfg.path is None:
        raise ValueError(
            "the model path is not set (actor_rollout_ref.model.path or critic.model.path)"
        )
    if model_cfg.external_lib:
        importlib.import_module(model_cfg.external_lib)
    trust = bool(model_cfg.trust_remote_code)
    hf_config = AutoConfig.from_pretrained(model_cfg.path, trust_remote_code=trust)
    for key, value in dict(model_cfg.override_config or {}).items():
        if not hasattr(hf_config, key):
            raise ValueError(f"override_config.{key}: the model config has no such field")
        setattr(hf_config, key, value)
    for key, value in (config_fields or {}).items():
        setattr(hf_config, key, value)
    model = auto_cls.from_pretrained(
        model_cfg.path, config=hf_config, dtype=to_dtype(dtype), trust_remote_code=trust
    )
    if model_cfg.enable_gradient_checkpointing:
        enable_activation_checkpointing(model)
    return model


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each decoder layer's activations in backward (non-reentrant, so it
    composes with FSDP2); transformers 5 renamed gradient to activation checkpointing."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def mixed_precision_policy(fsdp_cfg: Any, device: torch.device) -> MixedPrecisionPolicy | None:
    """bf16 compute / fp32 reduction from ``fsdp_config.mixed_precision`` on GPU; None on
    CPU (compute stays in the weights' dtype)."""
    if device.type != "cuda":
        return None
    mp = fsdp_cfg.mixed_precision
    return MixedPrecisionPolicy(param_dtype=to_dtype(mp.param_dtype),
                                reduce_dtype=to_dtype(mp.reduce_dtype), cast_forward_inputs=True)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules to shard one by one: instances of the model's ``_no_split_modules``."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    # by MRO: fully_shard swaps a module's class for an FSDP subclass of it
    layers = [
        m
        for m in model.modules()
        if m is not model and any(c.__name__ in names for c in type(m).__mro__)
    ]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} lists no decoder layer class in "
            "_no_split_modules; cannot shard it layer by layer"
        )
    return layers


def shard_model(
    model: torch.nn.Module,
    mesh: DeviceMesh,
    mp_policy: MixedPrecisionPolicy | None,
    reshard_after_forward: bool = True,
) -> torch.nn.Module:
    """``fully_shard`` each decoder layer, then the root (which holds embeddings and head)."""
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard_after_forward}
    if mp_policy is not None:
        kwargs["mp_policy"] = mp_policy
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def build_sharded_model(
    model_cfg: Any,
    fsdp_cfg: Any,
    auto_cls: Any,
    mesh: DeviceMesh,
    device: torch.device,
    config_fields: dict[str, Any] | None = None,
    lora: bool = False,
) -> torch.nn.Module:
    """Load, shard and move a model to ``device``; see the module docstring. With ``lora``
    the loaded model gets LoRA adapters first (agentrl/workers/lora.py)."""
    model = load_model(model_cfg, auto_cls, fsdp_cfg.model_dtype, config_fields)
    if lora:
        from agentrl.workers.lora import apply_lora

        model = apply_lora(model, model_cfg)
    shard_model(
        model, mesh, mixed_precision_policy(fsdp_cfg, device), bool(fsdp_cfg.reshard_after_forward)
    )
    return model.to(device)


def full_state_dict(model: torch.nn.Module, rank0_only: bool = False) -> dict[str, torch.Tensor]:
    """The unsharded weights as CPU tensors under the Hugging Face names.

    A collective: every rank must call it. With ``rank0_only`` the other ranks get ``{}``
    (less memory, for an export written by rank 0).
    """
    from agentrl.workers.lora import is_lora, merged_weights

    if is_lora(model):  # the merged policy under the base model's names
        merged = {name: t.to("cpu", copy=True) for name, t in merged_weights(model)}
        return merged if not rank0_only or rank() == 0 else {}
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    if not rank0_only or world_size() == 1:
        options = StateDictOptions(full_state_dict=True, cpu_offload=False)
        state = get_model_state_dict(model, options=options)
        return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
    return get_model_state_dict(model, options=options)


def named_full_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every weight, gathered, once (tied weights under their first name); a LoRA model's
    merged, under the base model's names. A collective, as ``iter_full_weights``."""
    from agentrl.workers.lora import is_lora, merged_weights

    if is_lora(model):
        yield from merged_weights(model)
        return
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        yield name, full.detach()


def iter_full_weights(
    model: torch.nn.Module, bucket_bytes: int
) -> Iterator[dict[str, torch.Tensor]]:
    """The unsharded weights, a bucket at a time, on the model's device.

    A collective: every rank must iterate to the end (each tensor is all-gathered with
    ``DTensor.full_tensor()`` in the same order on every rank). A bucket holds whole
    tensors until it reaches ``bucket_bytes`` (a tensor larger than that is a bucket of
    its own), so no rank ever holds more than one bucket of full weights: the memory of a
    sync is bounded by ``max(bucket_bytes, largest tensor)`` plus one tensor, never the
    whole model. Tied weights (``lm_head.weight`` of a tied embedding) are sent once,
    under the first name the state dict lists. Names are the Hugging Face ones.
    """
    bucket: dict[str, torch.Tensor] = {}
    size = 0
    for name, full in named_full_weights(model):
        nbytes = full.numel() * full.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = {}, 0
        bucket[name] = full
        size += nbytes
    if bucket:
        yield bucket
