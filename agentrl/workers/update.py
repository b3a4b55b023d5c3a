"""The PPO update loop shared by the actor and the critic: epochs x mini-batches x
micro-batches with gradient accumulation, one optimizer step per mini-batch.

Loss scaling makes the update independent of how the mini-batch is cut, across
micro-batches and across data-parallel ranks: the gradient is the gradient of the loss
aggregated (``loss_agg_mode``) over the whole mini-batch of all ranks, as if it ran in one
pass. Each micro-batch's loss is weighted by its share of the mini-batch's normaliser:

- ``token-mean``: its valid tokens / the mini-batch's valid tokens (all ranks);
- ``seq-mean-token-sum`` / ``seq-mean-token-mean``: its valid sequences / all valid ones;
- ``seq-mean-token-sum-norm``: 1 (that mode divides by the padded length only);

and multiplied by the world size, because FSDP averages gradients over the ranks. Loss
terms are reported with the same weights (so ``pg_loss`` is the mini-batch's loss), and
ratios such as clip fractions are token-weighted means. A policy loss that fixes its own
aggregation (GSPO) is still weighted by the configured mode: only the gradient-accumulation
weights differ then, not the loss of each micro-batch. Metrics are averaged over the
optimizer steps of the call.

One host sync per optimizer step: the weights come from the mini-batch's CPU copy, a
micro-batch's metrics may be 0-d device tensors (the built-in losses' are) and stay on the
device until the step, where they and the gradient norm come to the host together.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from agentrl.algos.core import TOKEN_MEAN
from agentrl.distributed.process_group import world_size
from agentrl.protocol import DataProto
from agentrl.workers.forward import model_device
from agentrl.workers.micro_batch import MicroBatching, plan_micro_batches

logger = logging.getLogger(__name__)


@dataclass
class MicroResult:
    """What a loss function returns for one micro-batch.

    ``loss``: its loss aggregated over its own rows; ``losses``: loss-like values
    aggregated the same way (summed with the loss weight); ``stats``: token means such as
    clip fractions (summed with the token share). Values are floats or 0-d tensors
    (detached; left on the device, read once per optimizer step).
    """

    loss: torch.Tensor
    losses: dict[str, float | torch.Tensor] = field(default_factory=dict)
    stats: dict[str, float | torch.Tensor] = field(default_factory=dict)


MicroLoss = Callable[[DataProto], MicroResult]


@dataclass(frozen=True)
class UpdateSettings:
    """One update call: ``mini_batch_size`` rows per rank per optimizer step."""

    mini_batch_size: int
    epochs: int = 1
    shuffle: bool = False
    batching: MicroBatching = MicroBatching()
    grad_clip: float = 1.0
    loss_agg_mode: str = TOKEN_MEAN
    seed: int = 0


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum a CPU tensor over the ranks (a copy; unchanged on a single process)."""
    values = values.clone()
    if world_size() > 1:
        dist.all_reduce(values)
    return values


def loss_weight(mode: str, mask: torch.Tensor, tokens: float, sequences: float) -> float:
    """The micro-batch's share of the mini-batch normaliser (see the module docstring)."""
    if mode == "token-mean":
        return float(mask.sum()) / max(tokens, 1.0)
    if mode == "seq-mean-token-sum-norm":
        return 1.0
    return float((mask.sum(-1) > 0).sum()) / max(sequences, 1.0)


def mini_batches(
    data: DataProto, settings: UpdateSettings, epoch: int, step: int = 0
) -> list[DataProto]:
    """The mini-batches of one epoch of training step `step` (shuffled when asked, with a
    permutation drawn from the seed, the step and the epoch: a new one every step, the same
    in every run)."""
    return [data[rows] for rows in mini_batch_rows(len(data), settings, epoch, step)]


def mini_batch_rows(
    n: int, settings: UpdateSettings, epoch: int, step: int = 0
) -> list[torch.Tensor]:
    """The rows of each of `mini_batches`' mini-batches of a per-rank batch of `n`."""
    size = settings.mini_batch_size
    if n % size:
        raise ValueError(
            f"the per-rank batch of {n} trajectories is not a multiple of the "
            f"per-rank mini-batch of {size} (ppo_mini_batch_size x rollout.n / "
            "world size)"
        )
    if settings.shuffle:
        generator = torch.Generator().manual_seed(
            (settings.seed * 1_000_003 + step) * 1_009 + epoch
        )
        order = torch.randperm(n, generator=generator)
    else:
        order = torch.arange(n)
    return [order[i : i + size] for i in range(0, n, size)]


def run_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data: DataProto,
    settings: UpdateSettings,
    micro_loss: MicroLoss,
    prefix: str,
    step: int = 0,
) -> dict[str, float]:
    """``epochs`` passes of mini-batch steps of training step `step`; returns metrics
    averaged over the steps."""
    sums: dict[str, float] = defaultdict(float)
    steps = 0
    for epoch in range(settings.epochs):
        for mini in mini_batches(data, settings, epoch, step):
            for key, value in _step(model, optimizer, mini, settings, micro_loss, prefix).items():
                sums[key] += value
            steps += 1
    return {key: value / max(steps, 1) for key, value in sums.items()}


def _step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    mini: DataProto,
    settings: UpdateSettings,
    micro_loss: MicroLoss,
    prefix: str,
) -> dict[str, float]:
    """Accumulate the gradients of every micro-batch, clip, and take one optimizer step."""
    groups = plan_micro_batches(mini, settings.batching)
    mask = mini.batch["response_mask"]
    tokens, sequences = all_reduce_sum(
        torch.tensor([float(mask.sum()), float((mask.sum(-1) > 0).sum())], dtype=torch.float64)
    ).tolist()
    scale = world_size()  # FSDP averages gradients over the ranks
    losses: dict[str, float | torch.Tensor] = defaultdict(float)
    stats: dict[str, float | torch.Tensor] = defaultdict(float)
    optimizer.zero_grad(set_to_none=True)
    device = model_device(model)
    for i, rows in enumerate(groups):
        empty = len(rows) == 0  # a pass that only keeps the ranks' collectives aligned
        picked = rows if not empty else [0]
        micro = mini[picked].to(device)  # batches arrive on the CPU
        cpu_mask = mask[picked]  # weights from the CPU copy: no device sync
        weight = 0.0 if empty else loss_weight(settings.loss_agg_mode, cpu_mask, tokens, sequences)
        token_share = 0.0 if empty else float(cpu_mask.sum()) / max(tokens, 1.0)
        if isinstance(model, FSDPModule):
            model.set_requires_gradient_sync(i == len(groups) - 1)
        result = micro_loss(micro)
        (result.loss * (weight * scale)).backward()
        for key, value in result.losses.items():
            losses[key] = losses[key] + _detached(value) * weight
        for key, value in result.stats.items():
            stats[key] = stats[key] + _detached(value) * token_share
    grad_norm = _clip(model, settings.grad_clip)
    metrics = _reduce_metrics({**losses, **stats}, grad_norm)  # the step's one host sync
    norm = metrics.pop("__grad_norm__")
    _step_if_finite(optimizer, norm)
    metrics[f"{prefix}/grad_norm"] = norm
    return metrics


def _detached(value: float | torch.Tensor) -> float | torch.Tensor:
    return value.detach() if isinstance(value, torch.Tensor) else value


def _reduce_metrics(
    values: dict[str, float | torch.Tensor], grad_norm: torch.Tensor
) -> dict[str, float]:
    """Sum each metric over the ranks and read them and the (already global) gradient norm
    to the host in one transfer; the norm comes back as ``__grad_norm__``."""
    keys = sorted(values)
    device = grad_norm.device
    column = torch.stack(
        [torch.as_tensor(values[k], dtype=torch.float64, device=device).reshape(()) for k in keys]
        + [grad_norm.detach().to(torch.float64).reshape(())]
    ).cpu()  # (len(keys) + 1,)
    column[:-1] = all_reduce_sum(column[:-1])
    *summed, norm = column.tolist()
    return {**dict(zip(keys, summed, strict=True)), "__grad_norm__": norm}


def _clip(model: torch.nn.Module, grad_clip: float) -> torch.Tensor:
    """Clip the global gradient norm; the norm before clipping, on the device."""
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=grad_clip)
    if isinstance(grad_norm, DTensor):
        grad_norm = grad_norm.full_tensor()
    return grad_norm


def _step_if_finite(optimizer: torch.optim.Optimizer, norm: float) -> None:
    """Take the optimizer step unless the gradient norm is not finite."""
    if math.isfinite(norm):
        optimizer.step()
    else:
        logger.warning("gradient norm is %s: skipping this optimizer step", norm)
    optimizer.zero_grad(set_to_none=True)
