"""Tests for envs/retriever/server.py: a real uvicorn server on a loopback port."""

import httpx
import pytest

from agentrl.utils.serving import serve_in_thread
from envs.retriever.index import build_index
from envs.retriever.sample import sample_corpus, write_corpus
from envs.retriever.server import create_app


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    corpus = write_corpus(tmp_path_factory.mktemp("retriever") / "corpus.jsonl", sample_corpus())
    app = create_app(build_index(corpus), default_topk=2, max_topk=5, max_queries=3)
    with serve_in_thread(app) as base_url:
        yield base_url


def post(url, body):
    return httpx.post(url + "/retrieve", json=body, timeout=10)


def test_health(url):
    assert httpx.get(url + "/health", timeout=10).json() == {
        "status": "ok",
        "index": "bm25",
        "num_docs": 8,
    }


def test_batch_with_scores_ranks_right_document_first(url):
    response = post(
        url,
        {"queries": ["largest planet", "Nobel Prizes physicist"], "topk": 1, "return_scores": True},
    )
    assert response.status_code == 200
    result = response.json()["result"]
    assert len(result) == 2
    assert result[0][0]["document"] == {
        "id": "6",
        "contents": '"Jupiter"\nJupiter is the largest planet in the Solar System.',
    }
    assert result[0][0]["score"] > 0
    assert result[1][0]["document"]["id"] == "5"


def test_without_scores_default_topk_and_single_query(url):
    result = post(url, {"queries": ["capital city"]}).json()["result"]
    assert [doc["id"] for doc in result[0]] == ["0", "1"]  # default topk 2, bare documents
    single = post(url, {"query": "capital of Japan", "topk": 1}).json()["result"]
    assert single == [{"id": "7", "contents": '"Tokyo"\nTokyo is the capital of Japan.'}]


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"queries": []}, "'queries' is empty"),
        ({"queries": ["a", "  "]}, "query 1 is empty"),
        ({"queries": ["a"], "topk": 0}, "'topk' must be between 1 and 5, got 0"),
        ({"queries": ["a"], "topk": 6}, "'topk' must be between 1 and 5, got 6"),
        ({"queries": ["a"] * 4}, "too many queries: 4 > 3"),
        ({}, "give exactly one of 'queries' (a list) or 'query' (a string)"),
        (
            {"queries": ["a"], "query": "a"},
            "give exactly one of 'queries' (a list) or 'query' (a string)",
        ),
    ],
)
def test_bad_requests_get_422_with_message(url, body, detail):
    response = post(url, body)
    assert (response.status_code, response.json()) == (422, {"detail": detail})


def test_wrong_types_get_422(url):
    response = post(url, {"queries": "not a list"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "queries"]
