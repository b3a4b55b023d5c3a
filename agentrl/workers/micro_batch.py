"""Cut a batch into micro-batches, by count or by a token budget, and trim their padding.

A trajectory batch has left-padded prompts and right-padded responses:
``input_ids``/``attention_mask``/``position_ids`` are (B, P + R), ``responses`` (B, R).
A micro-batch only needs the columns from its earliest prompt token to its last response
token; ``trim_window`` finds them, so a micro-batch of short rows costs little even when
the batch is padded for its longest row.

By count (``ppo_micro_batch_size_per_gpu``): consecutive rows, ``size`` at a time.

By token budget (``use_dynamic_bsz`` with ``ppo_max_token_len_per_gpu``): the budget
counts the tokens a micro-batch actually computes once trimmed, i.e. rows x (longest
prompt + longest response) in it. Rows are sorted by length and cut greedily into the
fewest micro-batches that fit, so rows of similar length share one (little padding). This
is the padded counterpart of verl's dynamic batch size, which balances the sum of tokens
because it packs sequences without padding. With ``shared_prefix`` (``actor.shared_prefix``:
rows that share leading tokens are computed once, agentrl/workers/prefix_tree.py) the rows
are ordered by family first (``prefix_order``: rows that share at least
``MIN_SHARED_TOKENS`` leading tokens with a neighbour in token order), families by their
longest row, so a GRPO group or an agent session's segments land in one micro-batch; the
budget still counts the padded cost, an upper bound of what the shared pass computes.

With FSDP every rank must run the same number of forward/backward passes (each one holds
collectives), so ranks agree on the largest count (``agree_on_count``) and a rank with
fewer rows than micro-batches gets empty ones, which callers run on a dummy row with
weight 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from agentrl.distributed.process_group import world_size
from agentrl.protocol import DataProto


@dataclass(frozen=True)
class MicroBatching:
    """How to cut a (mini-)batch: by token budget when ``use_dynamic_bsz``, else by count
    (``micro_batch_size`` rows; None = the whole batch in one pass)."""

    use_dynamic_bsz: bool = False
    micro_batch_size: int | None = None
    max_token_len: int = 16384
    shared_prefix: bool = False  # token budget: rows sharing a prefix kept together

    def __post_init__(self) -> None:
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if self.max_token_len < 1:
            raise ValueError(f"max_token_len must be >= 1, got {self.max_token_len}")


def row_extents(
    attention_mask: torch.Tensor, response_length: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: columns from its first prompt token to the prompt's end, and from the
    response's start to its last valid token. (B, P + R) -> two int arrays (B,)."""
    prompt_length = attention_mask.shape[1] - response_length
    attention_mask = attention_mask.cpu()  # a plan is made on the host (one small copy)
    prompt = attention_mask[:, :prompt_length].bool()  # (B, P)
    response = attention_mask[:, prompt_length:].bool()  # (B, R)
    first = torch.where(prompt.any(-1), prompt.int().argmax(-1), torch.tensor(prompt_length))
    last = torch.where(
        response.any(-1), response_length - response.flip(-1).int().argmax(-1), torch.tensor(0)
    )
    return (prompt_length - first).numpy(), last.numpy()


MIN_SHARED_TOKENS = 32  # leading tokens two rows share to be computed once (prefix_tree.py)


def prefix_order(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 min_shared: int = MIN_SHARED_TOKENS) -> np.ndarray:  # fmt: skip
    """Row indices for the token budget's greedy cut: families of rows that share at least
    ``min_shared`` leading tokens (padding removed) with a neighbour in token order, the
    families longest row first, a family's rows in token order (module docstring)."""
    ids = input_ids.cpu().numpy()
    valid = attention_mask.cpu().bool().numpy()
    seqs = [ids[i][valid[i]] for i in range(len(ids))]
    by_tokens = sorted(range(len(seqs)), key=lambda i: seqs[i].tolist())
    family = np.zeros(len(seqs), dtype=np.int64)
    for prev, row in zip(by_tokens, by_tokens[1:], strict=False):
        a, b = seqs[prev], seqs[row]
        width = min(len(a), len(b), min_shared)
        same = len(a) >= min_shared and len(b) >= min_shared and (a[:width] == b[:width]).all()
        family[row] = family[prev] + (0 if same else 1)
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    longest = np.zeros(int(family.max(initial=0)) + 1, dtype=np.int64)
    np.maximum.at(longest, family, lengths)
    rank = {row: i for i, row in enumerate(by_tokens)}
    return np.array(sorted(range(len(seqs)), key=lambda r: (-longest[family[r]], family[r],
                                                            rank[r])), dtype=np.int64)  # fmt: skip


def trim_window(attention_mask: torch.Tensor, response_length: int) -> tuple[int, int]:
    """``(start, keep)``: keep columns ``start : P + keep`` of the (B, P + R) tensors and the
    first ``keep`` response columns; nothing outside holds a valid token. ``keep`` >= 1."""
    prompt_extent, response_extent = row_extents(attention_mask, response_length)
    prompt_length = attention_mask.shape[1] - response_length
    start = prompt_length - int(prompt_extent.max(initial=0))
    keep = max(1, int(response_extent.max(initial=0)))
    return start, keep


def count_groups(n: int, size: int | None) -> list[np.ndarray]:
    """Consecutive row indices, ``size`` at a time (the last group may be smaller)."""
    size = n if size is None else size
    return [np.arange(i, min(i + size, n)) for i in range(0, n, max(size, 1))]


def _greedy(
    order: np.ndarray, prompt: np.ndarray, response: np.ndarray, budget: int
) -> list[np.ndarray]:
    groups, current, max_p, max_r = [], [], 0, 0
    for row in order:
        p, r = max(max_p, prompt[row]), max(max_r, response[row])
        if current and (len(current) + 1) * (p + r) > budget:
            groups.append(np.array(current))
            current, p, r = [], prompt[row], response[row]
        current.append(row)
        max_p, max_r = p, r
    if current:
        groups.append(np.array(current))
    return groups


def _cost(group: np.ndarray, prompt: np.ndarray, response: np.ndarray) -> int:
    return len(group) * int(prompt[group].max() + response[group].max()) if len(group) else 0


def token_budget_groups(
    prompt: np.ndarray,
    response: np.ndarray,
    max_token_len: int,
    min_groups: int = 1,
    order: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Row indices per micro-batch: at least ``min_groups`` groups, each costing at most
    ``max_token_len`` (rows x (longest prompt + longest response)); see the module doc.
    ``order``: the rows in the order to cut them (default: longest first)."""
    n = len(prompt)
    lengths = prompt + response
    if n and int(lengths.max()) > max_token_len:
        raise ValueError(
            f"a sequence of {int(lengths.max())} tokens does not fit the token "
            f"budget ppo_max_token_len_per_gpu={max_token_len}; raise the budget"
        )
    if order is None:
        order = np.argsort(-lengths, kind="stable")
    groups = _greedy(order, prompt, response, max_token_len)
    if len(groups) < min_groups and n:
        groups = _groups_for_count(order, prompt, response, max_token_len, min_groups)
    while len(groups) < min_groups:  # fewer rows than micro-batches: add empty ones
        groups.append(np.zeros(0, dtype=np.int64))
    return groups


def _groups_for_count(
    order: np.ndarray, prompt: np.ndarray, response: np.ndarray, max_token_len: int, count: int
) -> list[np.ndarray]:
    """Up to ``count`` groups with the smallest budget that needs no more than ``count``,
    then split the most expensive groups until there are ``count`` (or one row each)."""
    low, high = int((prompt + response).max()), max_token_len
    while low < high:  # the smallest budget whose greedy cut has <= count groups
        mid = (low + high) // 2
        if len(_greedy(order, prompt, response, mid)) <= count:
            high = mid
        else:
            low = mid + 1
    groups = _greedy(order, prompt, response, low)
    while len(groups) < count:
        splittable = [g for g in groups if len(g) > 1]
        if not splittable:
            break
        widest = max(splittable, key=lambda g: _cost(g, prompt, response))
        index = next(i for i, g in enumerate(groups) if g is widest)
        half = len(widest) // 2
        groups[index : index + 1] = [widest[:half], widest[half:]]
    return groups


def agree_on_count(count: int) -> int:
    """The largest ``count`` over the ranks (every rank must run as many passes)."""
    if world_size() == 1:
        return count
    tensor = torch.tensor([count], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def plan_micro_batches(data: DataProto, batching: MicroBatching) -> list[np.ndarray]:
    """Row indices of each micro-batch of ``data`` (the same count on every rank)."""
    n = len(data)
    if not batching.use_dynamic_bsz:
        groups = count_groups(n, batching.micro_batch_size)
        count = agree_on_count(len(groups))
        return groups + [np.zeros(0, dtype=np.int64)] * (count - len(groups))
    prompt, response = row_extents(data.batch["attention_mask"], data.batch["responses"].shape[1])
    order = None
    if batching.shared_prefix:
        order = prefix_order(data.batch["input_ids"], data.batch["attention_mask"])
    groups = token_budget_groups(prompt, response, batching.max_token_len, order=order)
    count = agree_on_count(len(groups))
    if count != len(groups):
        groups = token_budget_groups(prompt, response, batching.max_token_len, count, order)
    return groups


def padded_tokens(data: DataProto, groups: list[np.ndarray]) -> int:
    """Tokens computed over the micro-batches once trimmed (for throughput metrics)."""
    prompt, response = row_extents(data.batch["attention_mask"], data.batch["responses"].shape[1])
    return sum(
        len(g) * (int(prompt[g].max()) + max(1, int(response[g].max()))) for g in groups if len(g)
    )
