"""LoRA for the actor (``actor_rollout_ref.model.lora_rank > 0``), with peft.

    model = apply_lora(load_model(...), cfg.model)    # before FSDP2 sharding
    for bucket in hf_weights(model, bucket_bytes): ...  # merged weights, Hugging Face names

``apply_lora`` wraps the policy in a peft ``LoraConfig(r=lora_rank, lora_alpha,
target_modules, lora_dropout=0)``: the base weights are frozen and only the adapters (and
their optimizer state) train. The rollout engine and the HF export never see adapters:
``hf_weights`` gathers each LoRA layer's base weight and adapters and yields the merged
weight ``W + (B @ A) * alpha / r`` under the base model's Hugging Face name, so an engine
or ``from_pretrained`` loads the current policy as a plain model. The reference model stays
the base model (no adapters), as the initial policy is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.tensor import DTensor

LORA_EXTRA = "install peft (pip install peft) to train with actor_rollout_ref.model.lora_rank > 0"


def apply_lora(model: torch.nn.Module, model_cfg: Any) -> torch.nn.Module:
    """The model with LoRA adapters on ``target_modules`` (``all-linear`` or a list)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as err:  # an optional dependency
        raise ImportError(LORA_EXTRA) from err
    targets = model_cfg.target_modules
    if not isinstance(targets, str):
        targets = [str(t) for t in targets]
    config = LoraConfig(r=int(model_cfg.lora_rank), lora_alpha=float(model_cfg.lora_alpha),
                        target_modules=targets, lora_dropout=0.0, bias="none",
                        task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def is_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a peft model (FSDP2 keeps the class as a base of its own)."""
    return callable(getattr(model, "get_base_model", None)) and hasattr(model, "peft_config")


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model inside a peft model (the model itself otherwise)."""
    return model.get_base_model() if is_lora(model) else model


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach()


def merged_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(Hugging Face name, full weight)`` of a peft model, each LoRA layer merged.

    A collective under FSDP2 (every rank must iterate to the end, in the same order)."""
    from peft.tuners.lora import LoraLayer

    inner = model.get_base_model()
    layers = {name: m for name, m in inner.named_modules() if isinstance(m, LoraLayer)}
    seen: set[int] = set()
    for name, tensor in inner.state_dict(keep_vars=True).items():
        if ".lora_" in name or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        module_name, _, leaf = name.rpartition(".")
        owner = module_name.removesuffix(".base_layer")
        if owner == module_name or owner not in layers:
            yield name, _full(tensor)
            continue
        full = _full(tensor)
        if leaf == "weight":
            layer = layers[owner]
            for adapter in layer.active_adapters:
                a = _full(layer.lora_A[adapter].weight)
                b = _full(layer.lora_B[adapter].weight)
                delta = (b.float() @ a.float()) * float(layer.scaling[adapter])
                full = (full.float() + delta).to(full.dtype)
        yield f"{owner}.{leaf}", full


def full_state_dict_of_adapters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' weights, gathered, on the CPU, under peft's names (a collective)."""
    from peft import get_peft_model_state_dict

    full = {name: _full(t).to("cpu", copy=True)
            for name, t in model.state_dict(keep_vars=True).items() if ".lora_" in name}
    return get_peft_model_state_dict(model, state_dict=full)


__all__ = ["LORA_EXTRA", "apply_lora", "base_model", "full_state_dict_of_adapters", "is_lora",
           "merged_weights"]
