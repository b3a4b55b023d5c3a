"""Supervised fine-tuning (SFT) of a causal LM on multi-turn tool-use conversations.

    metrics = run_sft("model_dir", "sft.jsonl", "out/sft", epochs=3, lr=1e-3, batch_size=8,
                      max_length=1024, seed=0)

The warm-up before RL (as in ReTool / Search-R1 style recipes): the model learns the tool
call format and the answer format from correct trajectories, so RL starts from a policy
that already calls the tools. One process, no FSDP: this is for small models and the CPU
quickstart; the data is `agentrl.data.sft.SFTDataset` (assistant-only loss, the rollout
engine's exact token layout).

Loss: cross-entropy of each next token, averaged over the assistant tokens of the batch
(token-mean). AdamW with a linear warm-up over the first 10% of steps, then constant.
The model and tokenizer are written to `output_dir` with `save_pretrained`, ready for
`actor_rollout_ref.model.path`.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.data.sft import SFTDataset, read_sft_rows, sft_collate_fn

logger = logging.getLogger(__name__)


def masked_lm_loss(
    logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-mean next-token cross-entropy over the tokens with loss mask 1.

    Returns `(loss, n_tokens)`; position t predicts token t + 1, so the mask of the target
    token decides whether a position counts.
    """
    targets = input_ids[:, 1:]  # (B, T-1)
    mask = loss_mask[:, 1:].float()  # (B, T-1)
    nll = F.cross_entropy(
        logits[:, :-1].float().transpose(1, 2), targets, reduction="none"
    )  # (B, T-1)
    n_tokens = mask.sum()
    return (nll * mask).sum() / n_tokens.clamp(min=1.0), n_tokens


def batch_loss(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward one SFT batch; the token-mean loss on its loss-mask tokens and their count."""
    logits = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
    ).logits  # (B, T, V)
    return masked_lm_loss(logits, batch["input_ids"], batch["loss_mask"])


def evaluate_loss(model: torch.nn.Module, loader: DataLoader) -> float:
    """The token-mean loss of `model` over every batch of `loader` (no gradients)."""
    model.eval()
    total, tokens = 0.0, 0.0
    with torch.no_grad():
        for batch in loader:
            loss, n = batch_loss(model, batch)
            total += loss.item() * n.item()
            tokens += n.item()
    return total / max(tokens, 1.0)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def _rows(data: str | Path | Sequence[dict]) -> list[dict]:
    if isinstance(data, (str, Path)):
        return read_sft_rows(data)
    return list(data)


def run_sft(
    model_path: str | Path,
    data: str | Path | Sequence[dict],
    output_dir: str | Path,
    epochs: int = 3,
    lr: float = 1e-3,
    batch_size: int = 8,
    max_length: int = 1024,
    seed: int = 0,
    weight_decay: float = 0.0,
    max_grad_norm: float = 1.0,
    truncation: str = "error",
) -> dict[str, Any]:
    """Fine-tune `model_path` on `data` (a jsonl/parquet path or rows) and save it.

    Returns metrics: `loss_before` and `loss_after` (token-mean loss over the whole data
    with the initial and the final weights), `epoch_losses` (mean training loss of each
    epoch), `steps`, `examples`, `assistant_tokens`, `time_s`, `output_dir`.
    """
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be >= 1, got {epochs} and {batch_size}")
    started = time.perf_counter()
    _seed_everything(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    dataset = SFTDataset(_rows(data), tokenizer, max_length=max_length, truncation=truncation)
    if len(dataset) == 0:
        raise ValueError(f"no SFT examples in {data!r} (after truncation={truncation})")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def collate(examples):
        return sft_collate_fn(examples, pad)

    generator = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(
        dataset, batch_size=batch_size, shuffle=True, collate_fn=collate, generator=generator
    )
    eval_loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate)
    loss_before = evaluate_loss(model, eval_loader)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    total_steps = epochs * len(train_loader)
    warmup = max(1, math.ceil(0.1 * total_steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup)
    )
    epoch_losses = []
    for epoch in range(epochs):
        epoch_losses.append(_train_epoch(model, train_loader, optimizer, scheduler, max_grad_norm))
        logger.info("sft epoch %d/%d: loss %.4f", epoch + 1, epochs, epoch_losses[-1])
    loss_after = evaluate_loss(model, eval_loader)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    metrics = {
        "loss_before": loss_before,
        "loss_after": loss_after,
        "epoch_losses": epoch_losses,
        "steps": total_steps,
        "examples": len(dataset),
        "assistant_tokens": sum(sum(e.loss_mask) for e in dataset.examples),
        "time_s": time.perf_counter() - started,
        "output_dir": str(output_dir),
    }
    logger.info(
        "sft done in %.1fs: loss %.4f -> %.4f over %d steps, saved to %s",
        metrics["time_s"],
        loss_before,
        loss_after,
        total_steps,
        output_dir,
    )
    return metrics


def _train_epoch(
    model: torch.nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    max_grad_norm: float,
) -> float:
    """One pass over `loader`; returns the token-weighted mean training loss."""
    model.train()
    total, tokens = 0.0, 0.0
    for batch in loader:
        loss, n = batch_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        scheduler.step()
        total += loss.item() * n.item()
        tokens += n.item()
    return total / max(tokens, 1.0)
