"""Exact piecewise encoding: re-encode only the parts of a text whose ids are not known yet.

A fast (Rust) tokenizer cuts a text at its added tokens (`<|im_start|>`, `<tool_call>`, ...)
before anything else, leftmost-longest, and then normalizes, pre-tokenizes and encodes each
piece between two added tokens on its own (tokenizers' `AddedVocabulary.
extract_and_normalize`). When every step after the cut is piece-local,

    encode(text) == concat(encode(piece) or [the added token's id] for piece in pieces(text))

so the ids of a piece seen before (the system prompt and its tool schemas, shared by every
request; a tool response the trajectory encoded when it was appended) are reused, and only
new pieces (the model's own text) are encoded, in one call. The tokenization sanity check
(`agentrl.rollout.request`) compares a trajectory with `encode(whole rendering)` this way:
the same answer as encoding the whole text, for a fraction of the tokenizer's work.

`PieceEncoder.exact` says whether the identity holds for the tokenizer, decided once from
its JSON (`reason` names the first step that is not piece-local); when it does not, `encode`
is the tokenizer's whole-text encode. Piece-local: a transformers tokenizer backed by
`tokenizers` whose encode is the library's own; every added token matched as written (not
normalized) and cut exactly (no lstrip/rstrip/single_word), special tokens not split; any
normalizer (it runs per piece); pre-tokenizers from `_LOCAL_PRE_TOKENIZERS` (not Metaspace,
whose `first` prepend scheme depends on where the piece is; ByteLevel without
`add_prefix_space`); a model without BPE dropout (random splits).
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

# pre-tokenizers that split each piece by its own content only
_LOCAL_PRE_TOKENIZERS = {
    "ByteLevel", "Split", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit",
    "BertPreTokenizer", "UnicodeScripts", "CharDelimiterSplit", "Sequence",
}  # fmt: skip
# transformers modules whose encode path is a plain call of the backend's encode_batch
_LIBRARY_ENCODE = ("transformers.tokenization_utils_base",
                   "transformers.tokenization_utils_tokenizers",
                   "transformers.tokenization_utils_fast")  # fmt: skip
_ENCODE_METHODS = ("encode", "_encode_plus", "encode_plus", "_batch_encode_plus")

Known = MutableMapping[str, tuple[int, ...]]  # piece text -> its ids


def library_encode(tokenizer: Any, why: bool = False) -> bool | str:
    """Whether every encode method of `tokenizer`'s class is transformers' own (a subclass
    may override one); with `why`, the first one that is not, named, instead of False."""
    for name in _ENCODE_METHODS:
        owner = next((c for c in type(tokenizer).__mro__ if name in vars(c)), None)
        if owner is not None and owner.__module__ not in _LIBRARY_ENCODE:
            return f"{type(tokenizer).__name__}.{name} is not the library's" if why else False
    return True


def _not_piece_local(tokenizer: Any) -> str | None:
    """Why `encode(text)` may differ from the concatenation over its pieces; None if it
    cannot (module docstring)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return "not a fast (tokenizers) tokenizer"
    own = library_encode(tokenizer, why=True)
    if own is not True:
        return own
    if getattr(tokenizer, "split_special_tokens", False) or backend.encode_special_tokens:
        return "special tokens are split"
    spec = json.loads(backend.to_str())
    for token in spec.get("added_tokens") or []:
        if token["normalized"] or token["lstrip"] or token["rstrip"] or token["single_word"]:
            return f"added token {token['content']!r} is not matched exactly as written"
    pending = [spec.get("pre_tokenizer")]
    while pending:
        step = pending.pop()
        if step is None:
            continue
        if step["type"] not in _LOCAL_PRE_TOKENIZERS:
            return f"pre-tokenizer {step['type']}"
        if step["type"] == "ByteLevel" and step.get("add_prefix_space"):
            return "pre-tokenizer ByteLevel with add_prefix_space"
        pending.extend(step.get("pretokenizers") or [])
    if (spec.get("model") or {}).get("dropout"):
        return "BPE dropout"
    return None


class PieceEncoder:
    """`encode(text, known)`: the ids `encode_text(text)` gives, reusing known pieces.

    Args:
        tokenizer: the transformers tokenizer `encode_text` uses.
        encode_text: the whole-text encode to reproduce (`ChatRenderer.encode`).
        cache_size: pieces kept across texts (least recently used dropped first), and
            recorded texts.
    """

    def __init__(self, tokenizer: Any, encode_text: Callable[[str], list[int]],
                 cache_size: int = 1024):  # fmt: skip
        self.encode_text = encode_text
        self.reason = _not_piece_local(tokenizer)
        self.exact = self.reason is None
        self.cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        # the pieces of texts recorded before, by text (deltas repeat: "the tool said done")
        self.remembered: OrderedDict[str, dict[str, tuple[int, ...]]] = OrderedDict()
        self.cache_size = cache_size
        self.added: dict[str, int] = {}  # content -> id
        self._cut: re.Pattern | None = None
        if self.exact:
            spec = json.loads(tokenizer.backend_tokenizer.to_str())
            self.added = {t["content"]: t["id"] for t in spec.get("added_tokens") or []
                          if t["content"]}  # fmt: skip
        if self.added:  # longest first: Python's alternation then matches leftmost-longest
            ordered = sorted(self.added, key=len, reverse=True)
            self._cut = re.compile("(" + "|".join(map(re.escape, ordered)) + ")")
        self._added_ids = set(self.added.values())
        self._separator = min(self.added, key=len) if self.added else None

    def pieces(self, text: str) -> list[str]:
        """`text` cut at its added tokens: other text and added tokens alternate, starting
        and ending with other text (possibly empty)."""
        return self._cut.split(text) if self._cut is not None else [text]

    def encode(self, text: str, known: Known | None = None) -> list[int]:
        """`encode_text(text)`, reusing the ids of pieces in `known` or in the cache."""
        if not self.exact:
            return self.encode_text(text)
        pieces = self.pieces(text)
        parts: list[Sequence[int] | None] = []
        missing: list[str] = []
        for i, piece in enumerate(pieces):
            if i % 2:
                parts.append((self.added[piece],))
            elif not piece:
                parts.append(())
            else:
                ids = self._lookup(piece, known)
                if ids is None:
                    missing.append(piece)
                parts.append(ids)
        if missing:
            encoded = self._encode_pieces(missing)
            if encoded is None:
                return self.encode_text(text)
            found = iter(encoded)
            parts = [next(found) if ids is None else ids for ids in parts]
        return [i for ids in parts for i in ids]

    def encode_batch(self, texts: Sequence[str]) -> list[tuple[list[int], dict]] | None:
        """Each text's ids (`encode_text(text)`) and its pieces' ids (for `known`), every
        distinct piece of the batch encoded once, in one call: a batch of prompts that share
        their system prompt and tool schemas pays for those once, not once per prompt.
        None when the tokenizer is not piece-local or the pieces do not cut back (the
        caller encodes the whole texts instead)."""
        if not self.exact:
            return None
        cut = [self.pieces(text) for text in texts]
        distinct = list(dict.fromkeys(p for pieces in cut for p in pieces[::2] if p))
        encoded = self._encode_pieces(distinct, keep=False) if distinct else []
        if encoded is None:
            return None
        ids_of = dict(zip(distinct, encoded, strict=True))
        added = self.added
        out = []
        for pieces in cut:
            ids: list[int] = []
            own: dict[str, tuple[int, ...]] = {}
            for i, piece in enumerate(pieces):
                if i % 2:
                    ids.append(added[piece])
                elif piece:
                    own[piece] = span = ids_of[piece]
                    ids.extend(span)
            out.append((ids, own))
        return out

    def remember(self, text: str, ids: Sequence[int], known: Known) -> None:
        """Record in `known` the ids of each piece of `text`, given `ids == encode_text(text)`
        (nothing when the tokenizer is not piece-local or the ids do not split cleanly)."""
        if not self.exact:
            return
        pairs = self.remembered.get(text)
        if pairs is None:  # not a text seen before (the same tool response, ...)
            pieces = self.pieces(text)
            spans = self._split_ids(ids, pieces[1::2])
            if spans is None:
                return
            pairs = {piece: span for piece, span in zip(pieces[::2], spans, strict=True) if piece}
            self.remembered[text] = pairs
            while len(self.remembered) > self.cache_size:
                self.remembered.popitem(last=False)
        else:
            self.remembered.move_to_end(text)
        known.update(pairs)

    def _lookup(self, piece: str, known: Known | None) -> tuple[int, ...] | None:
        if known is not None and piece in known:
            return known[piece]
        ids = self.cache.get(piece)
        if ids is not None:
            self.cache.move_to_end(piece)
        return ids

    def _encode_pieces(self, pieces: list[str], keep: bool = True) -> list[tuple[int, ...]] | None:
        """Each piece's ids from one encode of the pieces joined by an added token (one call
        instead of one per piece; `keep`: into the cache); None when the joined text does
        not cut back into them."""
        separator = self._separator
        joined = separator.join(pieces)
        if self.pieces(joined) != [p for piece in pieces for p in (piece, separator)][:-1]:
            return None  # a piece and the separator made another added token
        spans = self._split_ids(self.encode_text(joined), [separator] * (len(pieces) - 1))
        if spans is None:
            return None
        if not keep:
            return spans
        for piece, span in zip(pieces, spans, strict=True):
            self.cache[piece] = span
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        return spans

    def _split_ids(self, ids: Sequence[int], added: list[str]) -> list[tuple[int, ...]] | None:
        """`ids` cut at the ids of the added tokens `added` (in order): the ids of the text
        between them; None when the added ids in `ids` are not exactly those."""
        cuts = [position for position, token in enumerate(ids) if token in self._added_ids]
        if [ids[c] for c in cuts] != [self.added[token] for token in added]:
            return None
        bounds = [-1, *cuts, len(ids)]
        return [tuple(ids[a + 1 : b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
