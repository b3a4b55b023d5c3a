"""Token log-probs (and entropy) through the output layer, chunk by chunk, without keeping
a (tokens x vocabulary) tensor.

A language model's last step, ``logits = hidden @ W.T (+ b)``, makes one fp32 row of the
whole vocabulary per token: at Qwen2.5's 151,936 tokens and 8,192 positions that is ~5 GB,
kept for backward, with as much again for its softmax and its gradient. Here the logits
exist one chunk of positions at a time (about ``CHUNK_ELEMENTS`` floats): forward keeps
only the hidden states, the labels and one log-sum-exp per token; backward recomputes each
chunk's logits and turns them into the gradients of the hidden states, of ``W`` and of
``b`` (one extra matmul per chunk, the price of the memory).

Numerics follow the full-logits path exactly: the logits of a chunk are made in the
hidden states' dtype (as the model's own head would), then cast to fp32 and divided by
the temperature; log-probs are ``z[label] - logsumexp(z)`` and the entropy is
``logsumexp(z) - sum softmax(z) * z``. Gradients (with ``p = softmax(z)``, upstream
gradients ``g`` of the log-prob and ``e`` of the entropy ``H``):

    d logp / dz = onehot(label) - p          d H / dz = -p * (log p + H)

so ``dz = g * onehot - p * (g + e * (log p + H))``, then ``dh = dz W / T`` and
``dW = dz^T h / T``.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor

CHUNK_ELEMENTS = 1 << 26  # fp32 logits per chunk (256 MB): rows = this // vocabulary
_MIN_CHUNK_ROWS = 16


def chunk_rows(vocab_size: int, chunk_elements: int = CHUNK_ELEMENTS) -> int:
    """Positions per chunk for a vocabulary: as many as fit ``chunk_elements`` logits."""
    return max(_MIN_CHUNK_ROWS, chunk_elements // max(vocab_size, 1))


def _chunk_logits(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, temperature: float
) -> Tensor:
    """(c, H) -> (c, V) fp32 logits divided by the temperature (a new tensor)."""
    logits = torch.nn.functional.linear(hidden, weight, bias).float()
    if temperature != 1.0:
        logits.div_(temperature)
    return logits


def _entropy(logits: Tensor, lse: Tensor) -> Tensor:
    """``logsumexp(z) - sum softmax(z) * z`` per row of (c, V) logits (``entropy_from_logits``'s
    formula), the sum as a batched dot."""
    p = (logits - lse.unsqueeze(-1)).exp_()
    return lse - torch.bmm(p.unsqueeze(1), logits.unsqueeze(2)).view(-1)  # (c,)


class _ChunkedHeadStats(torch.autograd.Function):
    """(hidden (N, H), weight (V, H), bias (V,) | None, labels (N,)) -> (log-probs (N,),
    entropy (N,) or an empty tensor); fp32 outputs."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, temperature, rows, want_entropy, entropy_grad):
        n = hidden.shape[0]
        log_probs = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = (
            torch.empty(n, dtype=torch.float32, device=hidden.device)
            if want_entropy
            else torch.empty(0, dtype=torch.float32, device=hidden.device)
        )
        for start in range(0, n, rows):
            end = min(start + rows, n)
            logits = _chunk_logits(hidden[start:end], weight, bias, temperature)  # (c, V)
            chunk_lse = torch.logsumexp(logits, dim=-1)  # (c,)
            lse[start:end] = chunk_lse
            picked = logits.gather(-1, labels[start:end].unsqueeze(-1)).squeeze(-1)
            log_probs[start:end] = picked - chunk_lse
            if want_entropy:
                entropy[start:end] = _entropy(logits, chunk_lse)
            del logits
        ctx.temperature, ctx.rows, ctx.entropy_grad = temperature, rows, entropy_grad
        ctx.has_bias = bias is not None
        ctx.save_for_backward(
            hidden, weight, bias if bias is not None else hidden.new_empty(0), labels, lse, entropy
        )
        if not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, bias, labels, lse, entropy = ctx.saved_tensors
        bias = bias if ctx.has_bias else None
        temperature, rows = ctx.temperature, ctx.rows
        n = hidden.shape[0]
        use_entropy = ctx.entropy_grad and grad_entropy is not None and grad_entropy.numel()
        if grad_log_probs is None:
            grad_log_probs = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if need_h else None
        grad_weight = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        )
        grad_bias = (
            torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device)
            if need_b and bias is not None
            else None
        )
        for start in range(0, n, rows):
            end = min(start + rows, n)
            h = hidden[start:end]
            g = grad_log_probs[start:end].float() / temperature  # (c,)
            logits = _chunk_logits(h, weight, bias, temperature)
            logits.sub_(lse[start:end].unsqueeze(-1))  # log p
            if use_entropy:
                e = grad_entropy[start:end].float() / temperature
                # dz = g * onehot - p * (g + e * (log p + H))
                coeff = (logits + entropy[start:end].unsqueeze(-1)).mul_(e.unsqueeze(-1))
                coeff.add_(g.unsqueeze(-1))
                grad_logits = logits.exp_().mul_(coeff).neg_()
                del coeff
            else:
                grad_logits = logits.exp_().mul_(-g.unsqueeze(-1))  # -g * p
            grad_logits.scatter_add_(-1, labels[start:end].unsqueeze(-1), g.unsqueeze(-1))
            grad_logits = grad_logits.to(hidden.dtype)
            if grad_hidden is not None:
                grad_hidden[start:end] = grad_logits @ weight
            if grad_weight is not None:
                grad_weight += (grad_logits.t() @ h).float()
            if grad_bias is not None:
                grad_bias += grad_logits.float().sum(0)
            del grad_logits
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        if grad_bias is not None:
            grad_bias = grad_bias.to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None


def head_log_probs(
    hidden: Tensor,
    weight: Tensor,
    labels: Tensor,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    entropy: bool = False,
    entropy_grad: bool = False,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> tuple[Tensor, Tensor | None]:
    """log softmax(hidden @ weight.T + bias)/T at ``labels`` (..., ) and, with ``entropy``,
    the entropy of that softmax (...,), both fp32, computed chunk by chunk.

    ``hidden`` is (..., H), ``labels`` (...). The entropy carries a gradient only with
    ``entropy_grad``; otherwise it is a metric (no gradient, no extra memory for backward).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    shape = labels.shape
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_labels = labels.reshape(-1).long()
    rows = chunk_rows(weight.shape[0], chunk_elements)
    log_probs, ent = _ChunkedHeadStats.apply(
        flat_hidden,
        weight,
        bias,
        flat_labels,
        float(temperature),
        rows,
        bool(entropy),
        bool(entropy and entropy_grad),
    )
    return log_probs.view(shape), (ent.view(shape) if entropy else None)
