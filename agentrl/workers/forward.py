"""Forward passes of one micro-batch: response log-probs and entropy, or values.

Both trim the micro-batch to the columns that hold tokens (``micro_batch.trim_window``),
run the model on those, and pad the result back to the full response length R with
zeros, so every caller sees (b, R) tensors aligned with ``responses`` and
``response_mask``.

Alignment: the logit at position t predicts token t + 1, so the log-prob of response
token j comes from the position just before it; likewise the value of response token j
is the critic's output at the position before it (the state the action was taken in),
as in verl.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from agentrl.algos import entropy_from_logits, logprobs_from_logits
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
    otherwise it is a detached metric.
    """
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


def response_values(model: torch.nn.Module, batch: Any) -> Tensor:
    """The value model's output for every response token (b, R): its scalar head at the
    position before the token."""
    inputs, _, keep = _trimmed_inputs(batch)
    out = model(**inputs, use_cache=False)
    values = out.logits.float()  # (b, P' + keep, 1)
    if values.dim() == 3:
        values = values.squeeze(-1)  # (b, P' + keep)
    return _pad_to(values[:, -keep - 1 : -1], batch)  # (b, R)
