"""Tests for envs/retriever/index.py: corpus reading, BM25 build/save/load, rebuild rules."""

import json

import pytest

from envs.retriever.index import (
    BM25Index,
    CorpusError,
    build_index,
    load_index,
    open_index,
    read_corpus,
)
from envs.retriever.sample import sample_corpus, write_corpus


@pytest.fixture
def corpus_path(tmp_path):
    return write_corpus(tmp_path / "corpus.jsonl", sample_corpus())


def test_read_corpus_forms_and_errors(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": 7, "contents": "\\"T\\"\\nbody"}\n\n{"title": "A", "text": "b c"}\n')
    assert list(read_corpus(path)) == [
        {"id": "7", "contents": '"T"\nbody'},
        {"id": "2", "contents": '"A"\nb c'},
    ]
    path.write_text('{"id": 1, "contents": "x"}\n{"id": 2}\n')
    with pytest.raises(CorpusError, match=r"c.jsonl:2: needs a 'contents' string"):
        list(read_corpus(path))
    path.write_text("{not json\n")
    with pytest.raises(CorpusError, match=r"c.jsonl, line 1: invalid JSON"):
        list(read_corpus(path))
    with pytest.raises(CorpusError, match="corpus file not found"):
        list(read_corpus(tmp_path / "missing.jsonl"))


def test_bm25_ranks_the_right_document_first(corpus_path):
    index = build_index(corpus_path)
    assert isinstance(index, BM25Index) and len(index) == 8
    hits = index.search(
        ["who created the python programming language", "capital of Japan", "zzz qqq"], topk=3
    )
    assert hits[0][0][0]["id"] == "2"
    assert hits[1][0][0] == {"id": "7", "contents": '"Tokyo"\nTokyo is the capital of Japan.'}
    assert hits[2] == []  # no shared term: no hits rather than zero-score noise
    scores = [score for _, score in hits[1]]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)


def test_topk_larger_than_corpus_is_clamped(corpus_path):
    hits = build_index(corpus_path).search(["capital"], topk=50)
    assert {doc["id"] for doc, _ in hits[0]} == {"0", "1", "7"}


def test_open_index_builds_once_then_loads_and_rebuilds_on_change(corpus_path, tmp_path):
    index_dir = tmp_path / "idx"
    built = open_index(index_dir, corpus_path)
    meta = json.loads((index_dir / "meta.json").read_text())
    assert (meta["kind"], meta["num_docs"], meta["format"]) == ("bm25", 8, 1)
    stamp = (index_dir / "meta.json").stat().st_mtime_ns
    loaded = open_index(index_dir, corpus_path)
    assert (index_dir / "meta.json").stat().st_mtime_ns == stamp  # not rebuilt
    query = ["highest mountain"]
    assert loaded.search(query, 2) == built.search(query, 2)
    assert load_index(index_dir).search(query, 2) == built.search(query, 2)
    assert open_index(index_dir).search(query, 1)[0][0][0]["id"] == "3"  # no corpus: load

    write_corpus(corpus_path, sample_corpus() + [{"id": "new", "contents": '"Mars"\nMars is red.'}])
    rebuilt = open_index(index_dir, corpus_path)
    assert len(rebuilt) == 9
    assert rebuilt.search(["mars red"], 1)[0][0][0]["id"] == "new"


def test_errors(tmp_path, corpus_path):
    with pytest.raises(FileNotFoundError, match="no corpus given"):
        open_index(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="meta.json missing"):
        load_index(tmp_path / "empty")
    with pytest.raises(ValueError, match="unknown index kind 'fancy'"):
        build_index(corpus_path, "fancy")
    with pytest.raises(ValueError, match="needs an encoder model name"):
        build_index(corpus_path, "dense")
    empty = write_corpus(tmp_path / "empty.jsonl", [])
    with pytest.raises(CorpusError, match="empty corpus"):
        build_index(empty)


def test_dense_without_its_packages_names_them(corpus_path):
    try:
        import faiss  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("faiss and sentence-transformers are installed")
    with pytest.raises(ImportError, match="pip install faiss-cpu sentence-transformers"):
        build_index(corpus_path, "dense", dense_model="any-model")
