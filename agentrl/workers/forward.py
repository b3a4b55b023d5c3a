"""Forward passes of one micro-batch: response log-probs and entropy, or values.

Both trim the micro-batch to the columns that hold tokens (``micro_batch.trim_window``),
run the model on those, and pad the result back to the full response length R with
zeros, so every caller sees (b, R) tensors aligned with ``responses`` and
``response_mask``.

Alignment: the logit at position t predicts token t + 1, so the log-prob of response
token j comes from the position just before it; likewise the value of response token j
is the critic's output at the position before it (the state the action was taken in),
as in verl.

Log-probs and entropy go through the output layer chunk by chunk
(``algos.chunked_head``): the model's head is swapped, for the one call, for a function of
the last hidden states, so no (tokens x vocabulary) logits tensor is made or kept for
backward. It runs inside the model's own forward, where a sharded (FSDP2) model's head
weight is gathered. Models whose head is not a plain linear layer, or that post-process
their logits (softcapping, logit scaling), take the full-logits path
(``full_logits_log_probs``), which is also the reference the chunked one is tested against.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from agentrl.algos import entropy_from_logits, logprobs_from_logits
from agentrl.algos.chunked_head import head_log_probs
from agentrl.workers.micro_batch import trim_window

Tensor = torch.Tensor


def _trimmed_inputs(batch: Any) -> tuple[dict[str, Tensor], Tensor, int]:
    """Model inputs cut to the micro-batch's token window, the kept responses, and keep."""
    responses = batch["responses"]  # (b, R)
    attention_mask = batch["attention_mask"]  # (b, P + R)
    response_length = responses.shape[1]
    start, keep = trim_window(attention_mask, response_length)
    end = attention_mask.shape[1] - response_length + keep
    if "position_ids" in batch.keys():
        position_ids = batch["position_ids"]
    else:
        position_ids = torch.clamp(attention_mask.long().cumsum(-1) - 1, min=0)
    inputs = {
        "input_ids": batch["input_ids"][:, start:end],  # (b, P' + keep)
        "attention_mask": attention_mask[:, start:end],
        "position_ids": position_ids[..., start:end],
    }
    return inputs, responses[:, :keep], keep


def model_device(model: torch.nn.Module) -> torch.device:
    """The device a model computes on (its parameters' device; sharded ones included)."""
    return next(model.parameters()).device


def _pad_to(values: Tensor, batch: Any) -> Tensor:
    """(b, keep) -> (b, R): zeros on the right and wherever the response is padding, so
    the result does not depend on how rows were grouped into micro-batches."""
    response_length = batch["responses"].shape[1]
    response_attention = batch["attention_mask"][:, -response_length:]  # (b, R)
    padded = F.pad(values, (0, response_length - values.shape[1]))  # (b, R)
    return torch.where(response_attention.bool(), padded, torch.zeros_like(padded))


def response_log_probs(
    model: torch.nn.Module,
    batch: Any,
    temperature: float = 1.0,
    entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """log pi(response token | prefix) (b, R) and, when ``entropy``, the policy entropy
    at each response position (b, R); logits are divided by ``temperature`` first.

    The entropy carries a gradient only with ``entropy_grad`` (an entropy bonus);
    otherwise it is a detached metric. Computed from the hidden states in chunks where the
    model allows it (see the module docstring), else from the full logits.
    """
    head = chunkable_head(model)
    if head is None:
        return full_logits_log_probs(model, batch, temperature, entropy, entropy_grad)
    inputs, responses, keep = _trimmed_inputs(batch)

    def stats(hidden: Tensor) -> Tensor:  # (b, keep + 1, H) -> (b, keep, 2)
        log_probs, ent = head_log_probs(
            hidden[:, :-1],
            head.weight,
            responses,
            head.bias,
            temperature,
            entropy=entropy,
            entropy_grad=entropy_grad,
        )
        return torch.stack([log_probs, ent if ent is not None else log_probs.detach()], -1)

    with _head_replaced(head, stats):
        out = model(**inputs, use_cache=False, logits_to_keep=keep + 1)
    packed = out.logits  # (b, keep, 2)
    log_probs = _pad_to(packed[..., 0], batch)  # (b, R)
    if not entropy:
        return log_probs, None
    ent = packed[..., 1] if entropy_grad else packed[..., 1].detach()
    return log_probs, _pad_to(ent, batch)  # (b, R)


def full_logits_log_probs(
    model: torch.nn.Module,
    batch: Any,
    temperature: float = 1.0,
    entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """``response_log_probs`` through the model's full fp32 logits: the path for heads that
    cannot be chunked, and the reference for the chunked one."""
    inputs, responses, keep = _trimmed_inputs(batch)
    out = model(**inputs, use_cache=False, logits_to_keep=keep + 1)
    logits = out.logits[:, :-1].float()  # (b, keep, V)
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = _pad_to(logprobs_from_logits(logits, responses), batch)  # (b, R)
    if not entropy:
        return log_probs, None
    if entropy_grad:
        ent = entropy_from_logits(logits)
    else:
        with torch.no_grad():
            ent = entropy_from_logits(logits.detach())
    return log_probs, _pad_to(ent, batch)  # (b, R)


def chunkable_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The model's output layer when log-probs can be taken from its hidden states chunk by
    chunk: a plain ``nn.Linear`` head on a model that does not rescale or cap its logits."""
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if type(head) is not torch.nn.Linear:
        return None
    config = getattr(model, "config", None)
    for key in (
        "final_logit_softcapping",
        "logit_scale",
        "logits_scaling",
        "output_multiplier_scale",
    ):
        if getattr(config, key, None):
            return None
    return head


@contextmanager
def _head_replaced(head: torch.nn.Module, forward: Callable[[Tensor], Tensor]) -> Iterator[None]:
    """Run ``forward`` in place of ``head``'s own for the calls inside the block."""
    head.forward = forward
    try:
        yield
    finally:
        del head.forward


def response_values(model: torch.nn.Module, batch: Any) -> Tensor:
    """The value model's output for every response token (b, R): its scalar head at the
    position before the token."""
    inputs, _, keep = _trimmed_inputs(batch)
    out = model(**inputs, use_cache=False)
    values = out.logits.float()  # (b, P' + keep, 1)
    if values.dim() == 3:
        values = values.squeeze(-1)  # (b, P' + keep)
    return _pad_to(values[:, -keep - 1 : -1], batch)  # (b, R)
