"""Weights into a model in place, from a state dict or a model directory."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl.rollout.backends.weights import (
    load_dir_in_place,
    load_weights_in_place,
    read_weights_dir,
)


def test_a_directory_is_read_and_loaded_in_place(tiny_model_dir, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    changed = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for param in changed.parameters():
            param.add_(0.5)
    changed.save_pretrained(tmp_path / "st")
    torch.save(changed.state_dict(), tmp_path / "pytorch_model.bin")
    (tmp_path / "bin").mkdir()
    (tmp_path / "pytorch_model.bin").rename(tmp_path / "bin" / "pytorch_model.bin")
    embed = model.model.embed_tokens.weight
    load_dir_in_place(model, tmp_path / "st")
    assert model.model.embed_tokens.weight is embed  # the same tensor, new values
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 changed.state_dict().values(), strict=True))
    assert set(read_weights_dir(tmp_path / "bin")) == set(changed.state_dict())


def test_bad_sources_are_named(tiny_model_dir, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_weights_dir(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors or pytorch_model\\*.bin"):
        read_weights_dir(tmp_path)
    with pytest.raises(ValueError, match="1 weight names the model does not have"):
        load_weights_in_place(model, {"nope": torch.zeros(1)}, require_all=False)
    with pytest.raises(ValueError, match="shape \\(3,\\) does not match"):
        load_weights_in_place(model, {"model.norm.weight": torch.zeros(3)}, require_all=False)
