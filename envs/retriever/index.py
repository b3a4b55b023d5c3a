"""Retrieval indexes over a jsonl corpus: BM25 with bm25s, or dense with faiss.

Corpus format (Search-R1's): one JSON object per line, ``{"id": ..., "contents": ...}``
with ``contents = '"Title"\\ntext'``. Lines with ``title`` and ``text`` instead of
``contents`` are accepted and joined the same way.

An index is built once and saved to a directory (``meta.json`` says its kind); ``open_index``
loads it, or builds and saves it when the directory is empty or the corpus file changed.
Dense retrieval needs ``faiss`` (faiss-cpu or faiss-gpu) and ``sentence-transformers``; they
are imported only when a dense index is built or loaded.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from agentrl.utils.jsonl import JsonlError, read_jsonl

logger = logging.getLogger(__name__)

META_FILE = "meta.json"
FORMAT_VERSION = 1

Hit = tuple[dict[str, Any], float]  # (document {"id", "contents"}, score)


class RetrievalIndex(Protocol):
    kind: str

    def __len__(self) -> int: ...

    def search(self, queries: list[str], topk: int) -> list[list[Hit]]:
        """The best ``topk`` hits of every query, best first."""
        ...


class CorpusError(ValueError):
    """The corpus file is missing or has a malformed line."""


def read_corpus(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield ``{"id": str, "contents": str}`` for each line of a jsonl corpus."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    try:
        for lineno, row in read_jsonl(path):
            yield _normalize(row, path, lineno)
    except JsonlError as err:
        raise CorpusError(str(err)) from err


def _normalize(row: Any, path: Path, lineno: int) -> dict[str, Any]:
    if isinstance(row.get("contents"), str):
        contents = row["contents"]
    elif isinstance(row.get("text"), str):
        contents = f'"{row.get("title", "")}"\n{row["text"]}'
    else:
        raise CorpusError(f"{path}:{lineno}: needs a 'contents' string (or 'title' and 'text')")
    doc_id = row.get("id", lineno - 1)
    return {"id": str(doc_id), "contents": contents}


def corpus_fingerprint(path: str | Path) -> dict[str, Any]:
    """Identifies a corpus file version cheaply (no hashing of a multi-GB corpus)."""
    stat = Path(path).stat()
    return {"path": str(Path(path).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


class BM25Index:
    """BM25 (Lucene variant, bm25s) with English stopwords removed, no stemming."""

    kind = "bm25"

    def __init__(self, retriever: Any, corpus: Any) -> None:
        self._retriever = retriever
        self._corpus = corpus  # list of docs, or bm25s' lazily read JsonlCorpus

    def __len__(self) -> int:
        return len(self._corpus)

    @staticmethod
    def _tokenize(texts: list[str], return_ids: bool) -> Any:
        import bm25s

        return bm25s.tokenize(texts, stopwords="en", return_ids=return_ids, show_progress=False)

    @classmethod
    def build(cls, docs: list[dict[str, Any]]) -> BM25Index:
        import bm25s

        if not docs:
            raise CorpusError("cannot build an index of an empty corpus")
        retriever = bm25s.BM25()
        retriever.index(cls._tokenize([d["contents"] for d in docs], True), show_progress=False)
        return cls(retriever, docs)

    def save(self, index_dir: Path) -> None:
        self._retriever.save(str(index_dir), corpus=list(self._corpus), show_progress=False)

    @classmethod
    def load(cls, index_dir: Path) -> BM25Index:
        import bm25s

        retriever = bm25s.BM25.load(
            str(index_dir), load_corpus=True, mmap=True, show_progress=False
        )
        corpus = retriever.corpus
        retriever.corpus = None  # so that retrieve() returns indices, not documents
        return cls(retriever, corpus)

    def search(self, queries: list[str], topk: int) -> list[list[Hit]]:
        k = min(topk, len(self))
        tokens = self._tokenize(queries, False)
        indices, scores = self._retriever.retrieve(tokens, k=k, show_progress=False)
        results = []
        for row_ids, row_scores in zip(indices, scores, strict=True):
            # A document that shares no term with the query scores 0: not a hit.
            results.append(
                [
                    (self._corpus[int(i)], float(s))
                    for i, s in zip(row_ids, row_scores, strict=True)
                    if s > 0
                ]
            )
        return results


def _import_dense() -> tuple[Any, Any]:
    try:
        import faiss
        from sentence_transformers import SentenceTransformer
    except ImportError as err:
        raise ImportError(
            "dense retrieval needs faiss and sentence-transformers: "
            "pip install faiss-cpu sentence-transformers"
            f" (import failed: {err})"
        ) from err
    return faiss, SentenceTransformer


class DenseIndex:
    """Inner-product search (faiss ``IndexFlatIP``) over normalized sentence embeddings."""

    kind = "dense"

    def __init__(self, index: Any, encoder: Any, docs: list[dict[str, Any]], model: str) -> None:
        self._index = index
        self._encoder = encoder
        self._docs = docs
        self.model = model

    def __len__(self) -> int:
        return len(self._docs)

    @classmethod
    def build(cls, docs: list[dict[str, Any]], model: str, batch_size: int = 64) -> DenseIndex:
        faiss, sentence_transformer = _import_dense()
        if not docs:
            raise CorpusError("cannot build an index of an empty corpus")
        encoder = sentence_transformer(model)
        embeddings = encoder.encode(
            [d["contents"] for d in docs], batch_size=batch_size, normalize_embeddings=True
        ).astype("float32")  # (N, D)
        index = faiss.IndexFlatIP(embeddings.shape[1])
        index.add(embeddings)
        return cls(index, encoder, docs, model)

    def save(self, index_dir: Path) -> None:
        faiss, _ = _import_dense()
        faiss.write_index(self._index, str(index_dir / "dense.faiss"))
        with (index_dir / "docs.jsonl").open("w", encoding="utf-8") as f:
            for doc in self._docs:
                f.write(json.dumps(doc, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, index_dir: Path, model: str) -> DenseIndex:
        faiss, sentence_transformer = _import_dense()
        index = faiss.read_index(str(index_dir / "dense.faiss"))
        docs = list(read_corpus(index_dir / "docs.jsonl"))
        return cls(index, sentence_transformer(model), docs, model)

    def search(self, queries: list[str], topk: int) -> list[list[Hit]]:
        k = min(topk, len(self))
        embeddings = self._encoder.encode(queries, normalize_embeddings=True).astype("float32")
        scores, indices = self._index.search(embeddings, k)  # (Q, k) each
        return [
            [
                (self._docs[int(i)], float(s))
                for i, s in zip(row_ids, row_scores, strict=True)
                if i >= 0
            ]
            for row_ids, row_scores in zip(indices, scores, strict=True)
        ]


def build_index(
    corpus_path: str | Path, kind: str = "bm25", dense_model: str | None = None
) -> BM25Index | DenseIndex:
    """Build an index of ``kind`` ("bm25" or "dense") over a jsonl corpus, in memory."""
    if kind == "dense" and not dense_model:
        raise ValueError("a dense index needs an encoder model name (--dense-model)")
    if kind == "dense":
        _import_dense()  # fail before reading a large corpus
    docs = list(read_corpus(corpus_path))
    logger.info("building a %s index over %d documents from %s", kind, len(docs), corpus_path)
    if kind == "bm25":
        return BM25Index.build(docs)
    if kind == "dense":
        return DenseIndex.build(docs, dense_model)
    raise ValueError(f"unknown index kind {kind!r}; choose 'bm25' or 'dense'")


def save_index(
    index: BM25Index | DenseIndex, index_dir: str | Path, corpus_path: str | Path
) -> None:
    """Write the index and its ``meta.json`` (written last: a partial index has none)."""
    index_dir = Path(index_dir)
    index_dir.mkdir(parents=True, exist_ok=True)
    index.save(index_dir)
    meta = {
        "format": FORMAT_VERSION,
        "kind": index.kind,
        "num_docs": len(index),
        "corpus": corpus_fingerprint(corpus_path),
    }
    if isinstance(index, DenseIndex):
        meta["dense_model"] = index.model
    tmp = index_dir / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2))
    os.replace(tmp, index_dir / META_FILE)


def load_index(index_dir: str | Path) -> BM25Index | DenseIndex:
    """Load a saved index; its kind comes from ``meta.json``."""
    index_dir = Path(index_dir)
    meta_path = index_dir / META_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(f"no index in {index_dir} ({META_FILE} missing)")
    meta = json.loads(meta_path.read_text())
    if meta.get("kind") == "bm25":
        return BM25Index.load(index_dir)
    if meta.get("kind") == "dense":
        return DenseIndex.load(index_dir, meta["dense_model"])
    raise ValueError(f"{meta_path}: unknown index kind {meta.get('kind')!r}")


def open_index(
    index_dir: str | Path,
    corpus_path: str | Path | None = None,
    kind: str = "bm25",
    dense_model: str | None = None,
    rebuild: bool = False,
) -> BM25Index | DenseIndex:
    """Load the index in ``index_dir``, building it from ``corpus_path`` first if needed.

    It is (re)built when ``rebuild`` is set, when the directory holds no index, or when the
    corpus file's size or modification time differ from the ones the index was built from.
    """
    index_dir = Path(index_dir)
    meta_path = index_dir / META_FILE
    if not rebuild and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        stale = corpus_path is not None and meta.get("corpus") != corpus_fingerprint(corpus_path)
        if meta.get("kind") == kind and not stale:
            logger.info("loading the %s index in %s", kind, index_dir)
            return load_index(index_dir)
        logger.info("the index in %s is stale or of another kind: rebuilding", index_dir)
    if corpus_path is None:
        raise FileNotFoundError(f"no index in {index_dir} and no corpus given to build one")
    index = build_index(corpus_path, kind, dense_model)
    save_index(index, index_dir, corpus_path)
    return index
