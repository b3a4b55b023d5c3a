"""Tests for tools/search.py against a real retriever on a loopback port.

Retry and failure behaviour is checked against a small FastAPI server of the test's own
that answers 503, 429, 400, garbage or slowly on purpose (the real retriever never does).
"""

import asyncio
import socket
import time

import pytest
from fastapi import FastAPI, Request, Response

from agentrl.tools import execute_tool_call, load_tools
from agentrl.tools.testing import check_tool_contract
from agentrl.utils.serving import serve_in_thread
from envs.retriever.index import build_index
from envs.retriever.sample import sample_corpus, write_corpus
from envs.retriever.server import create_app
from tools.search import DEFAULT_SCHEMA, SearchTool, format_documents

FAST_RETRY = {"retry_backoff": 0.01, "retry_backoff_max": 0.02}


@pytest.fixture(scope="module")
def retriever_url(tmp_path_factory):
    corpus = write_corpus(tmp_path_factory.mktemp("search") / "corpus.jsonl", sample_corpus())
    with serve_in_thread(create_app(build_index(corpus))) as url:
        yield url + "/retrieve"


@pytest.fixture(scope="module")
def faulty():
    """Endpoints that fail on purpose; ``hits`` counts the requests each one got."""
    app = FastAPI()
    hits: dict[str, int] = {}

    @app.post("/{mode}")
    async def answer(mode: str, request: Request):
        hits[mode] = hits.get(mode, 0) + 1
        body = await request.json()
        doc = {"id": "1", "contents": '"T"\nok'}
        if mode == "flaky" and hits[mode] <= 2:
            return Response(status_code=503)
        if mode == "busy":
            return Response(status_code=429)
        if mode == "bad":
            return Response("no such thing", status_code=400)
        if mode == "garbage":
            return Response("<html>", media_type="text/html")
        if mode == "slow":
            await asyncio.sleep(0.6)
        if mode == "nested":  # a single-query server that nests like the batch API
            return {"result": [[doc]]}
        if "query" in body:
            return {"result": [doc]}
        return {"result": [[doc] for _ in body["queries"]]}

    with serve_in_thread(app) as url:
        yield url, hits


def search(tool, queries, timeout=10):
    return asyncio.run(execute_tool_call(tool, "i", {"query_list": queries}, timeout=timeout))


def test_format_documents_is_search_r1s():
    docs = [
        {"document": {"id": "1", "contents": '"Paris"\nParis is in France.'}, "score": 2.0},
        {"id": "2", "contents": '"Berlin"\nBerlin\nis in Germany.'},
        {"title": "Rome", "text": "Rome is in Italy."},
    ]
    assert format_documents(docs) == (
        'Doc 1(Title: "Paris") Paris is in France.\n'
        'Doc 2(Title: "Berlin") Berlin\nis in Germany.\n'
        'Doc 3(Title: "Rome") Rome is in Italy.'
    )


def test_search_against_real_retriever(retriever_url):
    tool = SearchTool({"retrieval_service_url": retriever_url, "topk": 1})
    response, reward, metrics = search(tool, ["who created the python programming language"])
    assert response.text == (
        'Doc 1(Title: "Python (programming language)") Python is a high-level programming '
        "language created by Guido van Rossum."
    )
    assert reward == 0.0
    assert (metrics["search_queries"], metrics["search_retries"]) == (1, 0)
    assert 0 < metrics["search_latency_s"] < 10


@pytest.mark.parametrize("request_format", ["batch", "single"])
def test_several_queries_joined_in_order(retriever_url, request_format):
    config = {"retrieval_service_url": retriever_url, "topk": 1, "request_format": request_format}
    response, _, metrics = search(
        SearchTool(config), ["capital of Japan", "largest planet", "zzzq"]
    )
    assert response.text == (
        'Doc 1(Title: "Tokyo") Tokyo is the capital of Japan.\n---\n'
        'Doc 1(Title: "Jupiter") Jupiter is the largest planet in the Solar System.\n---\n'
        "No results found."
    )
    assert metrics["search_queries"] == 3


def test_contract_through_yaml_config(retriever_url):
    entry = {
        "class_name": "tools.search.SearchTool",
        "config": {"type": "native", "retrieval_service_url": retriever_url, "rate_limit": 8},
        "tool_schema": DEFAULT_SCHEMA,
    }
    tool = load_tools([entry])["search"]
    assert tool.max_concurrent == 8  # verl's key read as ours
    report = asyncio.run(check_tool_contract(tool, {"query_list": ["highest mountain"]}))
    assert report.response.text.startswith('Doc 1(Title: "Mount Everest")')
    assert report.reward == 0.0


def test_one_tool_object_across_event_loops_and_aclose(retriever_url):
    tool = SearchTool({"retrieval_service_url": retriever_url, "topk": 1})
    for _ in range(2):  # each asyncio.run is a new loop: the client is remade, not reused

        async def go():
            out = await execute_tool_call(tool, "i", {"query_list": ["Tokyo"]}, timeout=10)
            await tool.aclose()
            return out

        assert asyncio.run(go())[0].text.startswith('Doc 1(Title: "Tokyo")')
        assert tool._http._clients == []


def test_dead_server_is_an_error_text_quickly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    tool = SearchTool(
        {"retrieval_service_url": f"http://127.0.0.1:{port}/retrieve", "timeout": 1, **FAST_RETRY}
    )
    start = time.monotonic()
    response, reward, metrics = search(tool, ["anything"])
    assert time.monotonic() - start < 3
    assert response.text.startswith(
        f"Error: search failed: cannot connect to http://127.0.0.1:{port}/retrieve: ConnectError"
    )
    assert response.text.endswith("(after 3 retries)")
    assert (reward, metrics) == (0.0, {"tool_error": "connection", "search_queries": 1,
                                       "infra_error": response.text.removeprefix("Error: ")})


def test_5xx_is_retried_until_success(faulty):
    url, hits = faulty
    tool = SearchTool({"retrieval_service_url": url + "/flaky", **FAST_RETRY})
    response, _, metrics = search(tool, ["q"])
    assert response.text == 'Doc 1(Title: "T") ok'
    assert (hits["flaky"], metrics["search_retries"]) == (3, 2)


def test_429_retries_are_bounded(faulty):
    url, hits = faulty
    tool = SearchTool({"retrieval_service_url": url + "/busy", "max_retries": 2, **FAST_RETRY})
    response, _, metrics = search(tool, ["q"])
    assert response.text == f"Error: search failed: {url}/busy answered HTTP 429 (after 2 retries)"
    assert (hits["busy"], metrics["tool_error"]) == (3, "http_status")
    assert "answered HTTP 429" in metrics["infra_error"]  # the retriever's failure


def test_4xx_is_not_retried(faulty):
    url, hits = faulty
    tool = SearchTool({"retrieval_service_url": url + "/bad", **FAST_RETRY})
    response, _, metrics = search(tool, ["q"])
    assert response.text == f"Error: search failed: {url}/bad answered HTTP 400: no such thing"
    assert (hits["bad"], metrics["tool_error"]) == (1, "http_status")
    assert "infra_error" not in metrics  # a 4xx answers what the model sent


def test_garbage_and_slow_answers(faulty):
    url, _ = faulty
    garbage = SearchTool({"retrieval_service_url": url + "/garbage"})
    response, _, metrics = search(garbage, ["q"])
    assert (response.text, metrics["tool_error"]) == (
        f"Error: search failed: {url}/garbage did not answer JSON",
        "bad_response",
    )
    slow = SearchTool({"retrieval_service_url": url + "/slow", "timeout": 0.2})
    start = time.monotonic()
    response, _, metrics = search(slow, ["q"])
    assert time.monotonic() - start < 1.5
    assert (response.text, metrics["tool_error"]) == (
        f"Error: search failed: {url}/slow timed out after 0.2 s (ReadTimeout)",
        "timeout",
    )


def test_single_format_accepts_nested_result(faulty):
    url, _ = faulty
    tool = SearchTool({"retrieval_service_url": url + "/nested", "request_format": "single"})
    assert search(tool, ["q"])[0].text == 'Doc 1(Title: "T") ok'


def test_bad_arguments_and_config():
    tool = SearchTool({"retrieval_service_url": "http://127.0.0.1:9/retrieve", "max_queries": 2})
    assert search(tool, ["a", "b", "c"])[0].text == "Error: at most 2 queries per call, got 3."
    response, _, metrics = asyncio.run(tool.execute("i", {"query_list": ["ok", " "]}))
    assert response.text == "Error: 'query_list' must be a non-empty list of non-empty strings."
    assert metrics == {"tool_error": "invalid_arguments"}
    with pytest.raises(ValueError, match="'retrieval_service_url' is required"):
        SearchTool({})
    with pytest.raises(ValueError, match=r"unknown config keys \['top_k'\]"):
        SearchTool({"retrieval_service_url": "u", "top_k": 3})
    with pytest.raises(ValueError, match="request_format must be 'batch' or 'single'"):
        SearchTool({"retrieval_service_url": "u", "request_format": "stream"})
