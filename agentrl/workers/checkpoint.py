"""Checkpoints of a sharded model: torch.distributed.checkpoint plus an HF export.

Layout of one checkpoint directory (``contents`` picks the parts; the config keys are
``actor.checkpoint.save_contents`` / ``load_contents`` and the critic's):

    dcp/                    model and optimizer, sharded: each rank writes its own shards
                            (``model``, ``optimizer``); a resume may use another world size
    extra_rank{r}.pt        LR scheduler, RNG states (python, numpy, torch, cuda), step and
                            the caller's extra state, per rank (``extra``)
    huggingface/            full weights via ``save_pretrained`` + tokenizer, written by rank
                            0 (``hf_model``): loadable by transformers, SGLang and vLLM

Every function here is a collective: all ranks call it. Which checkpoints to keep is the
trainer's decision (``trainer.max_actor_ckpt_to_keep``), not this module's.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from agentrl.config.validate import CHECKPOINT_CONTENTS
from agentrl.distributed.process_group import barrier, rank
from agentrl.workers.fsdp import full_state_dict
from agentrl.workers.lora import base_model, full_state_dict_of_adapters, is_lora

logger = logging.getLogger(__name__)

CONTENTS = CHECKPOINT_CONTENTS  # the one list: the validator's


def _check_contents(contents: Any) -> list[str]:
    contents = list(contents)
    unknown = [c for c in contents if c not in CONTENTS]
    if unknown:
        raise ValueError(f"unknown checkpoint contents {unknown}; valid: {', '.join(CONTENTS)}")
    return contents


def rng_state() -> dict[str, Any]:
    """The random generators of this process."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _sharded_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, contents: list[str]
) -> dict[str, Any]:
    if optimizer is not None and "optimizer" in contents:
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"optimizer": optim_state}
        if "model" in contents:
            state["model"] = model_state
        return state
    return {"model": get_model_state_dict(model)} if "model" in contents else {}


def save_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    contents: Any = ("model", "optimizer", "extra"),
    tokenizer: Any = None,
    extra_state: dict[str, Any] | None = None,
) -> Path:
    """Write the parts in ``contents`` under ``path`` (see the module docstring)."""
    contents = _check_contents(contents)
    path = Path(path)
    if rank() == 0:
        path.mkdir(parents=True, exist_ok=True)
    barrier()
    state = _sharded_state(model, optimizer, contents)
    if state:
        dcp.save(state, checkpoint_id=str(path / "dcp"))
    if "extra" in contents:
        extra = {
            "rng": rng_state(),
            "state": dict(extra_state or {}),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
        }
        torch.save(extra, path / f"extra_rank{rank()}.pt")
    if "hf_model" in contents:
        export_hf(path / "huggingface", model, tokenizer)
    barrier()
    logger.info("saved checkpoint %s (%s)", path, ", ".join(contents))
    return path


def load_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    contents: Any = ("model", "optimizer", "extra"),
) -> dict[str, Any]:
    """Load the parts in ``contents`` from ``path``; returns the saved ``extra_state``."""
    contents = [c for c in _check_contents(contents) if c != "hf_model"]
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint directory {path} does not exist")
    state = _sharded_state(model, optimizer, contents)
    if state:
        missing = sorted(set(state) - _saved_parts(path / "dcp"))
        if missing:
            raise FileNotFoundError(
                f"checkpoint {path} holds no {' or '.join(missing)} state; "
                "load only what it has (checkpoint.load_contents)"
            )
        dcp.load(state, checkpoint_id=str(path / "dcp"))
        if "optimizer" in state:
            set_state_dict(
                model,
                optimizer,
                model_state_dict=state.get("model", {}),
                optim_state_dict=state["optimizer"],
            )
        else:
            set_model_state_dict(model, state["model"])
    extra_state: dict[str, Any] = {}
    if "extra" in contents:
        extra_path = path / f"extra_rank{rank()}.pt"
        if not extra_path.is_file():
            raise FileNotFoundError(f"{extra_path} is missing (saved with another world size?)")
        extra = torch.load(extra_path, weights_only=False)
        set_rng_state(extra["rng"])
        if scheduler is not None and extra["scheduler"] is not None:
            scheduler.load_state_dict(extra["scheduler"])
        extra_state = extra["state"]
    barrier()
    logger.info("loaded checkpoint %s (%s)", path, ", ".join(contents))
    return extra_state


def _saved_parts(dcp_dir: Path) -> set[str]:
    """The top-level parts (``model``, ``optimizer``) of a saved sharded checkpoint."""
    if not dcp_dir.is_dir():
        return set()
    metadata = dcp.FileSystemReader(str(dcp_dir)).read_metadata()
    return {key.split(".", 1)[0] for key in metadata.state_dict_metadata}


def export_hf(
    path: str | Path,
    model: torch.nn.Module,
    tokenizer: Any = None,
    bucket_bytes: int | None = None,
    writer: bool | None = None,
    untie: bool = False,
) -> Path:
    """Gather the full weights and write a Hugging Face model directory from rank 0.

    With ``bucket_bytes`` the weights are gathered and written a bucket at a time
    (``iter_full_weights``): one safetensors shard per bucket plus the index, so rank 0
    never holds the whole model (the weight sync to SGLang servers uses this); without,
    ``save_pretrained`` writes the whole state dict (checkpoint exports: custom code too).
    ``writer`` (with ``bucket_bytes`` only) says whether this rank writes, to its own
    ``path``; None -> rank 0. Every rank gathers anyway, so several ranks may write (one
    copy per node for the servers there). ``untie`` (streamed only): a tied model is written
    with an output layer of its own, ``lm_head.weight`` a copy of the embeddings and
    ``tie_word_embeddings: false`` (servers that cannot update a tied one in place,
    agentrl/rollout/backends/untie.py); the model itself stays tied.
    """
    path = Path(path)
    if bucket_bytes is not None:
        writer = rank() == 0 if writer is None else writer
        return _export_streamed(path, model, tokenizer, bucket_bytes, writer, untie)
    if writer is not None or untie:
        raise ValueError("export_hf: writer and untie need bucket_bytes (the streamed export)")
    weights = full_state_dict(model, rank0_only=True)  # LoRA: merged into the base weights
    if rank() == 0:
        path.mkdir(parents=True, exist_ok=True)
        base_model(model).save_pretrained(path, state_dict=weights)
        if is_lora(model):  # the adapters alone too, for peft users
            adapter = {k: v for k, v in full_state_dict_of_adapters(model).items()}
            model.save_pretrained(path / "lora_adapter", state_dict=adapter)
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
    barrier()
    return path


def _export_streamed(
    path: Path, model: torch.nn.Module, tokenizer: Any, bucket_bytes: int, writer: bool,
    untie: bool,
) -> Path:  # fmt: skip
    import json

    from safetensors.torch import save_file

    from agentrl.rollout.backends.untie import untie_config_file, untied_tensors
    from agentrl.workers.fsdp import iter_full_weights

    untie = untie and bool(getattr(base_model(model).config, "tie_word_embeddings", False))
    if writer:
        path.mkdir(parents=True, exist_ok=True)
        base_model(model).config.save_pretrained(path)
        if untie:
            untie_config_file(path / "config.json")
        generation_config = getattr(base_model(model), "generation_config", None)
        if generation_config is not None:
            generation_config.save_pretrained(path)
    files: list[Path] = []
    weight_map: dict[str, str] = {}
    total = 0
    for i, bucket in enumerate(iter_full_weights(model, bucket_bytes)):
        if writer:
            shard = path / f"model-{i + 1:05d}.safetensors.partial"
            tensors = {k: v.detach().to("cpu").contiguous() for k, v in bucket.items()}
            if untie:  # the embeddings as updated, as the output layer too
                tensors = untied_tensors(tensors)
            save_file(tensors, str(shard), metadata={"format": "pt"})
            files.append(shard)
            total += sum(t.numel() * t.element_size() for t in tensors.values())
            weight_map.update(dict.fromkeys(tensors, shard.name))
        del bucket
    if writer:
        names = {}
        for i, shard in enumerate(files):  # HF's shard names: model-0000i-of-0000n
            final = path / f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
            shard.rename(final)
            names[shard.name] = final.name
        index = {"metadata": {"total_size": total},
                 "weight_map": {k: names[v] for k, v in sorted(weight_map.items())}}
        (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
    barrier()
    return path
