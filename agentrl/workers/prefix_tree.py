"""Plan a micro-batch as a tree of shared prefixes, so each shared token is computed once.

Rows that begin with the same tokens (a GRPO group's prompt, repeated ``rollout.n`` times;
the segments of one agent session, which share their history up to a branch point) are
found by their token ids, never by a uid: a compressed trie of the rows' tokens (left
padding and right padding removed). Each trie node is a chunk of tokens that all rows
under it share; each row ends in a leaf, its own suffix (at least its last token, so every
row keeps a pass of its own). A node is kept only when it saves at least ``min_saved``
token computations (``(rows - 1) x chunk length``); a dropped node's tokens go to its
children.

The plan runs level by level (``agentrl.workers.forward``): level 0 holds the root chunks
and the rows that share nothing, with no past; level d holds the children of level d-1's
nodes, each with its parent's KV cache as the past. Within a level the pieces are right-
padded to one width; a level's attention mask is its past's mask followed by its own, so a
past padded in the middle stays masked and every token sees exactly its own history, at
its own position (``position_ids`` are token indices in the row). Past columns that no
piece of a level sees (the padding of a parent piece shorter than its level's widest) are
dropped from that level's past.

Outputs are read per "entry": a (level row, position, target token) whose hidden state
gives the log-prob of the target (or the value at that position). A shared chunk's entries
are computed once for all its rows; only its last position, whose next token differs per
child, has one entry per distinct next token. ``index`` maps every (row, response column)
to its entry, so the gathered (b, keep) results line up with the flat computation's.

A plan is only made for rows laid out as the trainer makes them: left-padded prompts,
right-padded responses, one contiguous run of valid tokens, positions 0, 1, ... over them
(otherwise ``plan_prefix_tree`` returns None and the caller runs the flat forward).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch

from agentrl.workers.micro_batch import MIN_SHARED_TOKENS, row_extents

Tensor = torch.Tensor

MIN_SAVED_TOKENS = MIN_SHARED_TOKENS  # token computations a shared chunk must spare


@dataclass
class _Node:
    start: int  # the chunk is tokens [start, end) of every row in ``rows``
    end: int
    rows: list[int]
    children: list[_Node | int] = field(default_factory=list)  # nodes, or rows (leaves)


@dataclass(frozen=True)
class Level:
    """One forward pass of the plan: ``k`` pieces (chunks or row suffixes), right-padded."""

    input_ids: Tensor  # (k, S)
    attention_mask: Tensor  # (k, past + S): the parents' kept columns' mask, then the own
    position_ids: Tensor  # (k, S)
    parent: Tensor | None  # (k,) the previous level's row whose KV cache is the past
    past_columns: Tensor | None  # (past,) the parents' cache columns kept: any piece sees them
    entry_rows: Tensor  # (E,) level row of each output entry
    entry_positions: Tensor  # (E,) column in this level's S columns
    entry_targets: Tensor  # (E,) the token whose log-prob the entry gives

    def to(self, device: torch.device) -> Level:
        """The level with its tensors on ``device``."""
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(self, **{k: v.to(device) for k, v in moved.items() if v is not None})

    @property
    def tokens(self) -> int:
        """Tokens this pass computes (padding excluded)."""
        return int(self.attention_mask[:, -self.input_ids.shape[1] :].sum())


@dataclass(frozen=True)
class PrefixPlan:
    """How a micro-batch runs as a prefix tree; see the module docstring."""

    levels: list[Level]
    index: Tensor  # (b, keep) entry (over all levels, in order) of each response column
    valid: Tensor  # (b, keep) bool: the column holds a response token
    keep: int

    @property
    def tokens(self) -> int:
        """Tokens computed by the plan's passes."""
        return sum(level.tokens for level in self.levels)


def row_tokens(batch: dict[str, Tensor] | object) -> tuple[list[np.ndarray], np.ndarray] | None:
    """Each row's valid tokens (prompt then response) and its prompt length, or None when a
    row is not laid out as the trainer lays rows out (module docstring)."""
    attention_mask = batch["attention_mask"]  # (b, P + R)
    response_length = batch["responses"].shape[1]
    prompt_len, response_len = row_extents(attention_mask, response_length)
    width = attention_mask.shape[1]
    prompt_width = width - response_length
    mask = attention_mask.cpu().bool().numpy()
    columns = np.arange(width)
    first = prompt_width - prompt_len  # (b,)
    last = prompt_width + response_len  # (b,) exclusive
    expected = (columns[None] >= first[:, None]) & (columns[None] < last[:, None])
    if not (mask == expected).all() or (prompt_len == 0).any():
        return None
    if "position_ids" in batch.keys():
        positions = batch["position_ids"]
        if positions.dim() != 2:  # e.g. multimodal rotary positions
            return None
        positions = positions.cpu().numpy()
        want = columns[None] - first[:, None]
        if not (positions[expected] == want[expected]).all():
            return None
    ids = batch["input_ids"].cpu().numpy()
    seqs = [ids[i, first[i] : last[i]] for i in range(len(ids))]
    return seqs, prompt_len.astype(np.int64)


def _shared_end(rows: list[int], start: int, seqs: list[np.ndarray], caps: np.ndarray) -> int:
    """The end of the tokens all ``rows`` share from ``start`` on, at most each row's cap."""
    end = int(min(caps[r] for r in rows))
    first = seqs[rows[0]]
    for r in rows[1:]:
        differs = np.flatnonzero(first[start:end] != seqs[r][start:end])
        if len(differs):
            end = start + int(differs[0])
    return end


def _trie(rows: list[int], start: int, seqs: list[np.ndarray], caps: np.ndarray) -> list:
    """The compressed trie of ``rows`` (which share tokens [0, start)): nodes and leaves."""
    items: list[_Node | int] = []
    by_token: dict[int, list[int]] = defaultdict(list)
    for r in rows:
        if caps[r] <= start:
            items.append(r)
        else:
            by_token[int(seqs[r][start])].append(r)
    for part in by_token.values():
        if len(part) == 1:
            items.append(part[0])
            continue
        end = _shared_end(part, start, seqs, caps)
        items.append(_Node(start, end, part, _trie(part, end, seqs, caps)))
    return items


def _prune(items: list, start: int, min_saved: int) -> list:
    """Drop the nodes that save fewer than ``min_saved`` tokens; their children take their
    chunk (they start at ``start``, the end of the nearest kept ancestor)."""
    out: list[_Node | int] = []
    for item in items:
        if not isinstance(item, _Node):
            out.append(item)
        elif (len(item.rows) - 1) * (item.end - start) >= min_saved:
            out.append(_Node(start, item.end, item.rows, _prune(item.children, item.end, min_saved)))
        else:
            out.extend(_prune(item.children, start, min_saved))
    return out


class _LevelBuilder:
    """Collects one level's pieces and output entries (in blocks of consecutive entries)."""

    def __init__(self) -> None:
        self.pieces: list[tuple[np.ndarray, int, int | None]] = []  # tokens, start, parent
        self.entries: list[np.ndarray] = []  # (n, 3) blocks of (piece, position, target)
        self.count = 0

    def add_piece(self, tokens: np.ndarray, start: int, parent: int | None) -> int:
        self.pieces.append((tokens, start, parent))
        return len(self.pieces) - 1

    def block(self, piece: int, positions: np.ndarray, targets: np.ndarray) -> int:
        """Entries for ``positions`` (columns of ``piece``) and their targets; the first's
        index (the others follow it)."""
        first = self.count
        rows = np.full(len(positions), piece, dtype=np.int64)
        self.entries.append(np.stack([rows, positions, targets], axis=1).astype(np.int64))
        self.count += len(positions)
        return first

    def build(self, previous: Level | None, pad_id: int) -> Level:
        width = max(len(tokens) for tokens, _, _ in self.pieces)
        k = len(self.pieces)
        input_ids = torch.full((k, width), pad_id, dtype=torch.long)
        own_mask = torch.zeros((k, width), dtype=torch.long)
        positions = torch.zeros((k, width), dtype=torch.long)
        for i, (tokens, start, _) in enumerate(self.pieces):
            input_ids[i, : len(tokens)] = torch.from_numpy(tokens.astype(np.int64))
            own_mask[i, : len(tokens)] = 1
            positions[i] = start + torch.arange(width)
        parent = columns = None
        mask = own_mask
        if previous is not None:
            parent = torch.tensor([p for _, _, p in self.pieces], dtype=torch.long)
            past = previous.attention_mask[parent]  # (k, previous past + previous S)
            columns = torch.nonzero(past.any(0))[:, 0]  # padding no piece sees is dropped
            mask = torch.cat([past[:, columns], own_mask], dim=1)
        entries = np.concatenate(self.entries) if self.entries else np.zeros((0, 3), np.int64)
        keys = torch.from_numpy(entries)  # (E, 3)
        return Level(input_ids, mask, positions, parent, columns, keys[:, 0], keys[:, 1],
                     keys[:, 2])  # fmt: skip


class _Index:
    """Where each (row, response column) reads its output: a level and an entry in it."""

    def __init__(self, prompt_len: np.ndarray, lengths: np.ndarray, keep: int) -> None:
        self.prompt_len, self.lengths = prompt_len, lengths
        self.level = torch.zeros((len(lengths), keep), dtype=torch.long)
        self.entry = torch.zeros((len(lengths), keep), dtype=torch.long)

    def needed(self, row: int, lo: int, hi: int) -> tuple[int, int]:
        """Positions [a, b) within [lo, hi) whose next token is a response token of ``row``
        (the output at position t gives the token at t + 1)."""
        return max(lo, int(self.prompt_len[row]) - 1), min(hi, int(self.lengths[row]) - 1)

    def point(self, row: int, a: int, b: int, depth: int, first_entry: int) -> None:
        """Positions [a, b) of ``row`` read entries ``first_entry``, ``first_entry + 1``..."""
        j = a + 1 - int(self.prompt_len[row])  # the response column of position a
        self.level[row, j : j + b - a] = depth
        self.entry[row, j : j + b - a] = first_entry + torch.arange(b - a)


def _add_node(builder: _LevelBuilder, index: _Index, node: _Node, parent: int | None,
              seqs: list[np.ndarray], depth: int) -> int:  # fmt: skip
    """A shared chunk: its inner positions' entries once, its last position's once per
    distinct next token. Returns the chunk's piece."""
    start, end, rows = node.start, node.end, node.rows
    tokens = seqs[rows[0]]
    piece = builder.add_piece(tokens[start:end], start, parent)
    spans = {row: index.needed(row, start, end - 1) for row in rows}
    lo = min(a for a, _ in spans.values())
    if lo < end - 1:  # positions whose next token is still inside the chunk: all rows alike
        first = builder.block(piece, np.arange(lo, end - 1) - start, tokens[lo + 1 : end])
        for row, (a, b) in spans.items():
            if a < b:
                index.point(row, a, b, depth, first + a - lo)
    last: dict[int, int] = {}  # next token -> entry of the chunk's last position
    for row in rows:
        a, b = index.needed(row, end - 1, end)
        if a < b:
            target = int(seqs[row][end])
            if target not in last:
                last[target] = builder.block(piece, np.array([end - 1 - start]), np.array([target]))
            index.point(row, a, b, depth, last[target])
    return piece


def _add_leaf(builder: _LevelBuilder, index: _Index, row: int, start: int, parent: int | None,
              seqs: list[np.ndarray], depth: int) -> None:  # fmt: skip
    """A row's own suffix [start, end of the row): every needed position its own entry."""
    tokens = seqs[row]
    piece = builder.add_piece(tokens[start:], start, parent)
    a, b = index.needed(row, start, len(tokens))
    if a < b:
        first = builder.block(piece, np.arange(a, b) - start, tokens[a + 1 : b + 1])
        index.point(row, a, b, depth, first)


def plan_prefix_tree(
    batch: dict[str, Tensor] | object, min_saved: int = MIN_SAVED_TOKENS, pad_id: int = 0
) -> PrefixPlan | None:
    """The plan of a micro-batch (module docstring), or None when no prefix is shared
    enough or the rows are not laid out as the trainer lays them out."""
    found = row_tokens(batch)
    if found is None:
        return None
    seqs, prompt_len = found
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    caps = lengths - 1  # every row keeps at least its last token in a pass of its own
    items = _prune(_trie(list(range(len(seqs))), 0, seqs, caps), 0, min_saved)
    if all(not isinstance(item, _Node) for item in items):
        return None
    response_len = lengths - prompt_len
    keep = max(1, int(response_len.max()))
    index = _Index(prompt_len, lengths, keep)
    levels: list[Level] = []
    frontier: list[tuple[_Node | int, int | None, int]] = [(item, None, 0) for item in items]
    while frontier:
        builder = _LevelBuilder()
        next_frontier: list[tuple[_Node | int, int | None, int]] = []
        for item, parent, start in frontier:
            if isinstance(item, _Node):
                piece = _add_node(builder, index, item, parent, seqs, len(levels))
                next_frontier.extend((child, piece, item.end) for child in item.children)
            else:
                _add_leaf(builder, index, item, start, parent, seqs, len(levels))
        levels.append(builder.build(levels[-1] if levels else None, pad_id))
        frontier = next_frontier
    counts = torch.tensor([0] + [len(level.entry_rows) for level in levels[:-1]])
    valid = torch.arange(keep)[None] < torch.from_numpy(response_len)[:, None]  # (b, keep)
    flat_index = counts.cumsum(0)[index.level] + index.entry
    return PrefixPlan(levels, torch.where(valid, flat_index, 0), valid, keep)
