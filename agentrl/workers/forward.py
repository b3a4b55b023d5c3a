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

Shared prefixes (``actor.shared_prefix``): with ``shared_prefix=True`` a micro-batch whose
rows begin with the same tokens (a GRPO group's prompt, the segments of one agent session)
runs as a prefix tree (``agentrl.workers.prefix_tree``): each shared chunk once, then each
row's own suffix with the chunk's KV cache as its past (expanded to the rows, positions
and mask continuing the row's own), so every shared token is computed once in forward and,
since the gradient flows back through the cache into the chunk's one computation, once in
backward. Same numbers as the flat pass to float rounding. Ranks agree on the number of
passes (a plan's level count is per rank; FSDP needs the same collectives on every rank):
a rank with fewer runs one-token dummy passes. Where it cannot be exact
(``shared_prefix_problem``: another attention kernel, sliding-window or non-attention
layers, activation checkpointing in training, which drops the cache; a head that cannot be
chunked) or nothing is shared, the flat pass runs; the reason is logged once.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F

from agentrl.algos import entropy_from_logits, logprobs_from_logits
from agentrl.algos.chunked_head import head_log_probs
from agentrl.workers.lora import base_model
from agentrl.workers.micro_batch import agree_on_count, trim_window
from agentrl.workers.prefix_tree import Level, PrefixPlan, plan_prefix_tree

logger = logging.getLogger(__name__)

Tensor = torch.Tensor
EXACT_ATTENTION = ("sdpa", "eager")  # kernels whose masks the prefix tree's past is tested with


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
    shared_prefix: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """log pi(response token | prefix) (b, R) and, when ``entropy``, the policy entropy
    at each response position (b, R); logits are divided by ``temperature`` first.

    The entropy carries a gradient only with ``entropy_grad`` (an entropy bonus);
    otherwise it is a detached metric. Computed from the hidden states in chunks where the
    model allows it (see the module docstring), else from the full logits; shared prefixes
    once with ``shared_prefix`` (module docstring).
    """
    head = chunkable_head(model)
    if head is None:
        if shared_prefix:
            _log_once("its output layer is not a plain linear layer (full-logits path)")
        return full_logits_log_probs(model, batch, temperature, entropy, entropy_grad)
    plan = _plan(model, batch) if shared_prefix else None
    extra = _extra_passes(plan) if shared_prefix else 0
    if plan is not None:
        log_probs, ent = _shared_log_probs(model, head, plan, batch, temperature, entropy,
                                           entropy_grad)  # fmt: skip
    else:
        log_probs, ent = _flat_log_probs(model, head, batch, temperature, entropy, entropy_grad)
    return _with_dummy_passes(model, extra, log_probs), ent


def _flat_log_probs(model: torch.nn.Module, head: torch.nn.Linear, batch: Any,
                    temperature: float, entropy: bool,
                    entropy_grad: bool) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """``response_log_probs`` in one pass over the trimmed micro-batch."""
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


def response_values(model: torch.nn.Module, batch: Any, shared_prefix: bool = False) -> Tensor:
    """The value model's output for every response token (b, R): its scalar head at the
    position before the token; shared prefixes once with ``shared_prefix``."""
    plan = _plan(model, batch) if shared_prefix else None
    extra = _extra_passes(plan) if shared_prefix else 0
    if plan is not None:

        def read(out: Any, level: Level) -> Tensor:  # (E, 1): the values at the level's entries
            values = out.logits.float()  # (k, S, 1)
            return values[level.entry_rows, level.entry_positions].reshape(-1, 1)

        values = _pad_to(_run_plan(model, plan, read)[..., 0], batch)  # (b, R)
    else:
        values = _flat_values(model, batch)
    return _with_dummy_passes(model, extra, values)


def _flat_values(model: torch.nn.Module, batch: Any) -> Tensor:
    """``response_values`` in one pass over the trimmed micro-batch."""
    inputs, _, keep = _trimmed_inputs(batch)
    out = model(**inputs, use_cache=False)
    values = out.logits.float()  # (b, P' + keep, 1)
    if values.dim() == 3:
        values = values.squeeze(-1)  # (b, P' + keep)
    return _pad_to(values[:, -keep - 1 : -1], batch)  # (b, R)


# ---------------------------------------------------------------- shared prefixes


def shared_prefix_problem(model: torch.nn.Module) -> str | None:
    """Why ``model`` cannot run a prefix tree exactly now, or None when it can."""
    config = getattr(model, "config", None)
    attention = getattr(config, "_attn_implementation", None)
    if attention not in EXACT_ATTENTION:
        return f"attention kernel {attention!r} (the prefix tree runs with {EXACT_ATTENTION})"
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    kinds = set(getattr(text, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"} or getattr(text, "use_sliding_window", False):
        return f"layers other than full attention ({sorted(kinds)}, or a sliding window)"
    if model.training and torch.is_grad_enabled() and any(
        getattr(m, "gradient_checkpointing", False) for m in model.modules()
    ):
        return "activation checkpointing in training drops the KV cache (enable_gradient_checkpointing)"
    return None


_LOGGED: set[str] = set()


def _log_once(reason: str) -> None:
    if reason not in _LOGGED:
        _LOGGED.add(reason)
        logger.warning("shared_prefix: running the flat forward: %s", reason)


def _plan(model: torch.nn.Module, batch: Any) -> PrefixPlan | None:
    """The micro-batch's prefix tree when the model can run it exactly and it shares
    anything; None otherwise (the flat pass)."""
    problem = shared_prefix_problem(model)
    if problem is not None:
        _log_once(problem)
        return None
    return plan_prefix_tree(batch)


def _extra_passes(plan: PrefixPlan | None) -> int:
    """How many passes this rank runs short of the rank with the most: under FSDP every
    rank must run the same collectives, and a plan's level count is per rank. Agreed before
    any pass, so the agreement's own collective comes first on every rank."""
    passes = 1 if plan is None else len(plan.levels)
    return agree_on_count(passes) - passes


def _with_dummy_passes(model: torch.nn.Module, extra: int, result: Tensor) -> Tensor:
    """``result`` after ``extra`` one-token dummy passes whose outputs join it times 0, so
    their backward (and its collectives) runs too."""
    for _ in range(extra):
        ids = torch.zeros((1, 1), dtype=torch.long, device=model_device(model))
        dummy = model(input_ids=ids, use_cache=False).logits
        result = result + dummy.float().sum() * 0.0
    return result


def _cache_kwarg(model: torch.nn.Module) -> str:
    """transformers 5 names the KV-cache argument ``cache``; older releases ``past_key_values``
    (asked of the Hugging Face model: a peft model's forward takes ``**kwargs``)."""
    forward_args = inspect.signature(base_model(model).forward).parameters
    return "cache" if "cache" in forward_args else "past_key_values"


def _run_plan(
    model: torch.nn.Module,
    plan: PrefixPlan,
    read: Callable[[Any, Level], Tensor],
    around: Callable[[Level], Any] | None = None,
) -> Tensor:
    """Run the plan's levels; ``read(output, level)`` gives a level's entries (E, C), and
    ``around(level)``, when given, is a context the level's forward runs in. Returns
    (b, keep, C): each response column's entry, zeros where there is no token."""
    from transformers import DynamicCache

    device = model_device(model)
    kwarg = _cache_kwarg(model)
    outputs, past = [], None
    for depth, level in enumerate(plan.levels):
        level = level.to(device)
        last = depth == len(plan.levels) - 1
        if past is None:
            cache = None if last else DynamicCache()
        else:  # the parents' keys and values, one row per piece: the past of each piece
            layers = [(_past(k, level), _past(v, level)) for k, v in past]  # (k, h, past, d)
            cache = DynamicCache(ddp_cache_data=layers)
        with around(level) if around is not None else nullcontext():
            out = model(
                input_ids=level.input_ids,  # (k, S)
                attention_mask=level.attention_mask,  # (k, past + S)
                position_ids=level.position_ids,  # (k, S)
                use_cache=cache is not None,
                **{kwarg: cache},
            )
        outputs.append(read(out, level))
        if not last:
            past = [(layer.keys, layer.values) for layer in cache.layers]  # (k, h, past + S, d)
    entries = torch.cat(outputs)  # (E, C)
    gathered = entries[plan.index.to(device)]  # (b, keep, C)
    valid = plan.valid.to(device)[..., None]
    return torch.where(valid, gathered, torch.zeros_like(gathered))


def _past(states: Tensor, level: Level) -> Tensor:
    """The previous level's keys or values (k', h, T, d) as this level's past (k, h, past, d):
    each piece's parent row, the kept columns."""
    return states.index_select(0, level.parent).index_select(2, level.past_columns)


def _shared_log_probs(model: torch.nn.Module, head: torch.nn.Linear, plan: PrefixPlan,
                      batch: Any, temperature: float, entropy: bool,
                      entropy_grad: bool) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """``response_log_probs`` through the plan: each level's head sees only the hidden
    states of its entries, inside the model's forward as on the flat path."""

    def head_at_entries(level: Level) -> Any:
        def stats(hidden: Tensor) -> Tensor:  # (k, S, H) -> (E, 2)
            picked = hidden[level.entry_rows, level.entry_positions]  # (E, H)
            log_probs, ent = head_log_probs(
                picked, head.weight, level.entry_targets, head.bias, temperature,
                entropy=entropy, entropy_grad=entropy_grad,
            )
            return torch.stack([log_probs, ent if ent is not None else log_probs.detach()], -1)

        return _head_replaced(head, stats)

    packed = _run_plan(model, plan, lambda out, level: out.logits, head_at_entries)  # (b, keep, 2)
    log_probs = _pad_to(packed[..., 0], batch)  # (b, R)
    if not entropy:
        return log_probs, None
    ent = packed[..., 1] if entropy_grad else packed[..., 1].detach()
    return log_probs, _pad_to(ent, batch)  # (b, R)
