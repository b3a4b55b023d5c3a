"""Weights into a model in place: a state dict (or bucket of one), or a Hugging Face model
directory (safetensors shards, else pytorch_model*.bin). What the hf engine's
`update_weights` does with what the trainer sends."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch


def load_weights_in_place(
    model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], require_all: bool
) -> None:
    """Copy `state_dict` into the model's own tensors (dtype/device converted).

    Unknown names and shape mismatches raise ValueError naming them. With `require_all`,
    every tensor of the model must be covered (tied aliases such as `lm_head.weight` count
    as covered through the tensor they share).
    """
    target = model.state_dict()
    unknown = [name for name in state_dict if name not in target]
    if unknown:
        raise ValueError(f"{len(unknown)} weight names the model does not have, e.g. {unknown[:5]}")
    for name, tensor in state_dict.items():
        if tuple(tensor.shape) != tuple(target[name].shape):
            raise ValueError(
                f"weight {name!r}: shape {tuple(tensor.shape)} does not match the "
                f"model's {tuple(target[name].shape)}"
            )
    if require_all:
        covered = {target[name].data_ptr() for name in state_dict}
        missing = [name for name, t in target.items() if t.data_ptr() not in covered]
        if missing:
            raise ValueError(
                f"{len(missing)} model weights missing from the source, e.g. {missing[:5]}"
            )
    with torch.no_grad():
        for name, tensor in state_dict.items():
            target[name].copy_(tensor.to(device=target[name].device, dtype=target[name].dtype))


def read_weights_dir(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of an HF model directory (safetensors shards, else pytorch_model*.bin)."""
    if not path.is_dir():
        raise FileNotFoundError(f"model directory {path} does not exist")
    shards = sorted(path.glob("*.safetensors"))
    if shards:
        from safetensors.torch import load_file

        return {k: v for shard in shards for k, v in load_file(shard).items()}
    bins = sorted(path.glob("pytorch_model*.bin"))
    if bins:
        return {
            k: v
            for b in bins
            for k, v in torch.load(b, map_location="cpu", weights_only=True).items()
        }
    raise FileNotFoundError(f"no *.safetensors or pytorch_model*.bin weights in {path}")


def load_dir_in_place(model: torch.nn.Module, path: Path) -> None:
    """Every weight of the model from the HF directory `path`, in place."""
    load_weights_in_place(model, read_weights_dir(path), require_all=True)


__all__ = ["load_dir_in_place", "load_weights_in_place", "read_weights_dir"]
