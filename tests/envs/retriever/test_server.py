"""Tests for envs/retriever/server.py: a real uvicorn server on a loopback port."""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from agentrl.utils.serving import serve_in_thread
from envs.retriever.index import build_index
from envs.retriever.sample import sample_corpus, write_corpus
from envs.retriever.server import create_app


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    corpus = write_corpus(tmp_path_factory.mktemp("retriever") / "corpus.jsonl", sample_corpus())
    return build_index(corpus)


@pytest.fixture(scope="module")
def url(index):
    app = create_app(
        index,
        default_topk=2,
        max_topk=5,
        max_queries=3,
        max_query_chars=50,
        search_workers=2,
        max_body_bytes=2000,
    )
    with serve_in_thread(app) as base_url:
        yield base_url


def post(url, body):
    return httpx.post(url + "/retrieve", json=body, timeout=10)


def test_health(url):
    assert httpx.get(url + "/health", timeout=10).json() == {
        "status": "ok",
        "index": "bm25",
        "num_docs": 8,
        "search_workers": 2,
        "busy_workers": 0,
        "queue_depth": 0,
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
        ({"queries": ["a"] * 4}, "too many queries: 4 > max_queries (3)"),
        (
            {"queries": ["a", "b" * 51]},
            "query 1 is 51 characters, over max_query_chars (50)",
        ),
        ({"query": "c" * 60}, "query 0 is 60 characters, over max_query_chars (50)"),
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


def test_query_at_the_length_limit_is_searched(url):
    response = post(url, {"query": "planet " + "x" * 43})  # 50 characters
    assert response.status_code == 200
    assert response.json()["result"][0]["id"] == "6"


def test_body_over_the_limit_gets_413(url):
    content = json.dumps({"queries": ["planet"], "pad": "x" * 3000}).encode()
    response = httpx.post(
        url + "/retrieve",
        content=content,
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 413
    assert response.json() == {
        "detail": f"request body is {len(content)} bytes, over the limit of 2000 bytes "
        "(max_body_bytes)"
    }


def test_body_that_is_not_json_gets_400_saying_where(url):
    response = httpx.post(
        url + "/retrieve",
        content=b'{"queries": ["a"',
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert (response.status_code, response.json()) == (
        400,
        {
            "detail": "request body is not valid JSON: Expecting ',' delimiter: "
            "line 1 column 17 (char 16)"
        },
    )


class BlockingIndex:
    """The index, but every search waits for `release` (at most 10 s)."""

    def __init__(self, inner, release: threading.Event) -> None:
        self.inner, self.release, self.kind = inner, release, inner.kind

    def __len__(self) -> int:
        return len(self.inner)

    def search(self, queries, topk):
        self.release.wait(timeout=10)
        return self.inner.search(queries, topk)


def wait_for_health(base_url, busy, waiting, deadline_s=10.0):
    deadline = time.monotonic() + deadline_s
    while True:
        health = httpx.get(base_url + "/health", timeout=5).json()
        if (health["busy_workers"], health["queue_depth"]) == (busy, waiting):
            return health
        assert time.monotonic() < deadline, f"health stayed at {health}"
        time.sleep(0.02)


def test_health_answers_at_once_while_searches_block(index):
    # More blocked searches than FastAPI's shared thread pool has threads (40): a health
    # check in that pool would wait for one of them.
    release = threading.Event()
    app = create_app(BlockingIndex(index, release), search_workers=2)
    n = 45
    with serve_in_thread(app) as base_url, ThreadPoolExecutor(n) as clients:
        try:
            futures = [
                clients.submit(
                    httpx.post, base_url + "/retrieve", json={"query": "largest planet"}, timeout=30
                )
                for _ in range(n)
            ]
            health = wait_for_health(base_url, busy=2, waiting=n - 2)
            assert health["search_workers"] == 2
            start = time.monotonic()
            assert httpx.get(base_url + "/health", timeout=5).status_code == 200
            assert time.monotonic() - start < 2.0  # not behind the blocked searches (seconds each)
            assert not any(f.done() for f in futures)
        finally:
            release.set()
        responses = [f.result() for f in futures]
        assert [r.status_code for r in responses] == [200] * n
        assert {r.json()["result"][0]["id"] for r in responses} == {"6"}
        wait_for_health(base_url, busy=0, waiting=0)
