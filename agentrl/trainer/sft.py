"""Supervised fine-tuning (SFT) of a causal LM on multi-turn tool-use conversations.

    metrics = run_sft("model_dir", "sft.jsonl", "out/sft", epochs=3, lr=1e-3, batch_size=8,
                      max_length=1024, seed=0)
    metrics = run_sft("model_dir", None, "out/sft", trajectories="sessions.jsonl")

The warm-up before RL (as in ReTool / Search-R1 style recipes): the model learns the tool
call format and the answer format from correct trajectories, so RL starts from a policy
that already calls the tools. One process, no FSDP: this is for small models and the CPU
quickstart; the data is `agentrl.data.sft.SFTDataset` (assistant-only loss, the rollout
engine's exact token layout), and/or recorded agent sessions in the open trajectory format
(`trajectories`, docs/trajectories.md: a stronger agent's sessions become SFT data): every
segment with a policy token is an example of its own ids, trained on its loss-mask-1 tokens
only (the policy's; its prompt, tool results and template text never train).

Loss: cross-entropy of each next token, averaged over the assistant tokens of the batch
(token-mean). AdamW with a linear warm-up over the first 10% of steps, then constant.
The model and tokenizer are written to `output_dir` with `save_pretrained`, ready for
`actor_rollout_ref.model.path`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.algos.chunked_head import head_log_probs
from agentrl.data.sft import (
    SFTDataset,
    SFTExample,
    fit_examples,
    read_sft_rows,
    sft_collate_fn,
    token_example,
)
from agentrl.trainer.sft_check import SkillCheck, SkillStop, turn_reproduction
from agentrl.trajectories import check_trajectory, read_trajectories, trained_segments
from agentrl.utils.seeding import seed_everything
from agentrl.utils.threads import CPUThreads
from agentrl.workers.forward import chunkable_head

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
    """Forward one SFT batch; the token-mean loss on its loss-mask tokens and their count
    (the same value as `masked_lm_loss` on the full logits).

    Two shortcuts, each exact for what the loss reads:

    - the batch is right-padded (`sft_collate_fn`), so causal attention never lets a real
      token see the padding after it and positions count from 0 in every row: the
      attention mask and position ids are left out;
    - the output layer and the log-softmax run only at the positions whose next token is
      trained (the assistant's, ~1/3 of a conversation), not over the whole sequence: on
      the CPU quickstart this and the transposed full-vocabulary loss it replaces were
      ~45% of a step. The head and the log-softmax run chunk by chunk
      (`algos.chunked_head`), so no (tokens x vocabulary) logits are kept for backward.
      Models that post-process their logits (softcapping, logit scaling) take the full path.
    """
    input_ids, loss_mask = batch["input_ids"], batch["loss_mask"]
    head = chunkable_head(model)
    if head is None:
        logits = model(input_ids=input_ids).logits  # (B, T, V)
        return masked_lm_loss(logits, input_ids, loss_mask)
    hidden = model.base_model(input_ids=input_ids).last_hidden_state  # (B, T, H)
    trained = loss_mask[:, 1:].bool()  # (B, T-1): position t predicts token t + 1
    n_tokens = trained.sum()
    log_probs, _ = head_log_probs(
        hidden[:, :-1][trained], head.weight, input_ids[:, 1:][trained], head.bias
    )  # (N,), through the head chunk by chunk (algos.chunked_head)
    if log_probs.numel() == 0:
        return hidden.sum() * 0.0, n_tokens.float()
    return -log_probs.mean(), n_tokens.float()


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


def _rows(data: str | Path | Sequence[dict]) -> list[dict]:
    if isinstance(data, (str, Path)):
        return read_sft_rows(data)
    return list(data)


def sft_examples(
    data: str | Path | Sequence[dict] | None,
    trajectories: str | Path | Sequence[dict] | None,
    tokenizer: Any,
    max_length: int,
    truncation: str,
) -> list[SFTExample]:
    """The examples of ``data``'s conversations, then of ``trajectories``' trained segments
    (a file in the trajectory format, or its trajectories read already)."""
    if data is None and trajectories is None:
        raise ValueError("run_sft needs data (conversations) or trajectories (a file)")
    examples = []
    if data is not None:
        examples += SFTDataset(_rows(data), tokenizer, max_length=max_length,
                               truncation=truncation).examples  # fmt: skip
    if trajectories is not None:
        if isinstance(trajectories, (str, Path)):
            trajectories = read_trajectories(trajectories)
        for trajectory in trajectories:
            check_trajectory(trajectory)
        named = [(f"trajectory segment {name}", token_example(ids, mask))
                 for name, ids, mask in trained_segments(trajectories)]  # fmt: skip
        examples += fit_examples(named, max_length, truncation)
    return examples


def run_sft(
    model_path: str | Path,
    data: str | Path | Sequence[dict] | None,
    output_dir: str | Path,
    epochs: int = 3,
    lr: float = 1e-3,
    batch_size: int = 8,
    max_length: int = 1024,
    seed: int = 0,
    weight_decay: float = 0.0,
    max_grad_norm: float = 1.0,
    truncation: str = "error",
    steps: int | None = None,
    max_time_s: float | None = None,
    warmup_ratio: float = 0.1,
    warmup_steps: int | None = None,
    eval_loss: bool = True,
    progress: bool = True,
    until: SkillCheck | None = None,
    trajectories: str | Path | Sequence[dict] | None = None,
) -> dict[str, Any]:
    """Fine-tune `model_path` on `data` (a jsonl/parquet path or rows) and/or
    `trajectories` (a trajectory-format file or its trajectories; `sft_examples`) and save it.

    Trains `epochs` passes over the data, or exactly `steps` optimizer steps when given
    (the data repeats, reshuffled each pass); `max_time_s` stops earlier once that many
    seconds of training have passed (a compute-matched control). The learning rate warms
    up linearly over the first `warmup_ratio` of the steps (or `warmup_steps`, when given:
    a run whose length a check decides), then stays constant. With
    `until` (agentrl/trainer/sft_check.py), the run stops once a held-out skill check
    passes; `steps` is then the cap, and reaching it first is logged as a warning.

    Returns metrics: `loss_before` and `loss_after` (token-mean loss over the whole data
    with the initial and the final weights; None with `eval_loss=False`), `epoch_losses`
    (mean training loss of each pass, the last one possibly partial), `loss_curve`
    (`[step, mean loss since the previous point]`, ~50 points), `steps` (done), `examples`,
    `assistant_tokens`, `time_s`, `output_dir`, `stop_reason` (`steps`, `time`, `skill`
    or `cap`: `steps` reached before `until` passed) and, with `until`, `skill_check`
    (`threshold`, `reached_at`, `curve`, `last`).
    """
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be >= 1, got {epochs} and {batch_size}")
    if steps is not None and steps < 1:
        raise ValueError(f"steps must be >= 1 when given, got {steps}")
    started = time.perf_counter()
    seed_everything(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    dataset = sft_examples(data, trajectories, tokenizer, max_length, truncation)
    if len(dataset) == 0:
        raise ValueError(f"no SFT examples in {data or trajectories!r} "
                         f"(after truncation={truncation})")
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)  # data first
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def collate(examples):
        return sft_collate_fn(examples, pad)

    generator = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(
        dataset, batch_size=batch_size, shuffle=True, collate_fn=collate, generator=generator
    )
    eval_loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate)
    loss_before = evaluate_loss(model, eval_loader) if eval_loss else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    total_steps = steps if steps is not None else epochs * len(train_loader)
    if warmup_steps is not None and warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0 when given, got {warmup_steps}")
    if warmup_steps is None:
        warmup_steps = math.ceil(warmup_ratio * total_steps)
    warmup = max(1, warmup_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup)
    )
    deadline = None if max_time_s is None else time.perf_counter() + max_time_s
    skill = _skill_stop(model, tokenizer, until, max_length, truncation, pad)
    run = _train_steps(
        model, train_loader, optimizer, scheduler, max_grad_norm, total_steps, deadline, progress,
        skill.after_step if skill else None,
    )  # fmt: skip
    if skill is not None:
        run["skill_check"] = summary = skill.summary()
        if run["stop_reason"] == "steps":
            run["stop_reason"] = "cap"
            logger.warning(
                "sft hit its cap of %d steps before the held-out skill check passed: turn "
                "reproduction %.3f < %.2f; the model may lack the skill the next stage needs",
                total_steps, summary["last"] or 0.0, summary["threshold"],
            )  # fmt: skip
    loss_after = evaluate_loss(model, eval_loader) if eval_loss else None
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    metrics = {
        "loss_before": loss_before,
        "loss_after": loss_after,
        **run,
        "examples": len(dataset),
        "assistant_tokens": sum(sum(e.loss_mask) for e in dataset),
        "time_s": time.perf_counter() - started,
        "output_dir": str(output_dir),
    }
    logger.info(
        "sft done in %.1fs: %d steps, training loss %.4f -> %.4f, saved to %s",
        metrics["time_s"],
        run["steps"],
        run["loss_curve"][0][1] if run["loss_curve"] else float("nan"),
        run["loss_curve"][-1][1] if run["loss_curve"] else float("nan"),
        output_dir,
    )
    return metrics


def _skill_stop(
    model: torch.nn.Module,
    tokenizer: Any,
    check: SkillCheck | None,
    max_length: int,
    truncation: str,
    pad: int,
) -> SkillStop | None:
    """The stop rule of `check` on `model`, its held-out rows tokenized as training's."""
    if check is None:
        return None
    held_out = SFTDataset(_rows(check.rows), tokenizer, max_length=max_length,
                          truncation=truncation).examples  # fmt: skip
    return SkillStop(check, lambda: turn_reproduction(model, held_out, pad, check.batch_size))


def _train_steps(
    model: torch.nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    max_grad_norm: float,
    total_steps: int,
    deadline: float | None,
    progress: bool,
    stop: Callable[[int], bool] | None = None,
) -> dict[str, Any]:
    """Up to `total_steps` optimizer steps over repeated passes of `loader`, stopping at
    `deadline` (perf_counter seconds) or when `stop(step)` says so; returns `steps`,
    `epoch_losses`, `loss_curve`, `stop_reason` (`steps`, `time` or `skill`)."""
    model.train()
    every = max(1, total_steps // 50)
    epoch_losses: list[float] = []
    curve: list[list[float]] = []
    window, window_tokens = 0.0, 0.0
    step, reason = 0, "steps"
    bar = tqdm(
        total=total_steps if deadline is None else None,  # a time budget: steps unknown
        desc="sft",
        unit="step",
        disable=not progress,
        leave=False,
    )
    threads = CPUThreads()  # as many intra-op threads as cores other programs leave free
    while reason == "steps" and step < total_steps:
        if deadline is not None and time.perf_counter() >= deadline:
            reason = "time"
            break
        total, tokens = 0.0, 0.0
        for batch in loader:
            threads.tick()
            loss, n = batch_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            scheduler.step()
            step += 1
            value, count = loss.item() * n.item(), n.item()
            total, tokens = total + value, tokens + count
            window, window_tokens = window + value, window_tokens + count
            if step % every == 0 or step == total_steps:
                curve.append([float(step), window / max(window_tokens, 1.0)])
                bar.set_postfix(loss=f"{curve[-1][1]:.3f}")
                window, window_tokens = 0.0, 0.0
            bar.update(1)
            if stop is not None and stop(step):
                reason = "skill"
                if not curve or curve[-1][0] != step:  # the curve ends where training did
                    curve.append([float(step), window / max(window_tokens, 1.0)])
                break
            if deadline is not None and time.perf_counter() >= deadline:
                reason = "time"
                break
            if step >= total_steps:
                break
        epoch_losses.append(total / max(tokens, 1.0))
        logger.debug("sft pass %d: loss %.4f (step %d)", len(epoch_losses), epoch_losses[-1], step)
    bar.close()
    return {"steps": step, "epoch_losses": epoch_losses, "loss_curve": curve,
            "stop_reason": reason}  # fmt: skip
