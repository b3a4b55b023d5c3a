"""Fixtures of the worker tests: a tiny model whose greedy continuations vary."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


@pytest.fixture(scope="session")
def varied_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with its matrices scaled by 6: a random tiny model repeats one token
    under greedy decoding; sharper logits make greedy outputs differ per position, so "the
    rollout generates what the actor would" is a test that can fail."""
    out = tmp_path_factory.mktemp("varied_model")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.mul_(6.0)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out
