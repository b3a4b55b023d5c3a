"""agentrl/utils/http_limits.py against a real uvicorn server on loopback: the body size
limit (declared and streamed), the body deadline, and parse errors that say what is wrong."""

from __future__ import annotations

import json
import re
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from agentrl.utils.http_limits import BodyLimitMiddleware, harden
from agentrl.utils.serving import serve_in_thread

LIMIT = 1000
TIMEOUT = 0.5
JSON = {"content-type": "application/json"}


class Echo(BaseModel):
    queries: list[str]


def make_app(**limits) -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Echo) -> dict:
        return {"n": len(request.queries), "chars": sum(len(q) for q in request.queries)}

    @app.post("/refuse")
    async def refuse() -> dict:
        raise HTTPException(400, "refused by the endpoint")

    return harden(app, **limits)


@pytest.fixture(scope="module")
def limited():
    with serve_in_thread(make_app(max_body_bytes=LIMIT, body_timeout=TIMEOUT)) as url:
        yield url


@pytest.fixture(scope="module")
def default_limits():
    with serve_in_thread(make_app()) as url:
        yield url


def raw_exchange(url: str, *parts: bytes, pause: float = 0.0) -> tuple[int, dict, dict, float]:
    """Send `parts` on one connection (`pause` seconds apart), read until the server closes;
    returns (status, headers, JSON body, seconds from the first byte sent to the close)."""
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        start = time.monotonic()
        for i, part in enumerate(parts):
            if i:
                time.sleep(pause)
            sock.sendall(part)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        elapsed = time.monotonic() - start
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body), elapsed


def post_head(length: int) -> bytes:
    return (
        f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_declared_length_over_limit_is_refused_before_any_body(limited):
    status, headers, body, _ = raw_exchange(limited, post_head(10**9))  # no body sent at all
    assert status == 413
    assert body == {
        "detail": "request body is 1000000000 bytes, over the limit of 1000 bytes (max_body_bytes)"
    }
    assert headers["connection"] == "close"


def test_chunked_body_over_limit_is_refused_once_it_passes(limited):
    def chunks():
        yield from [b"x" * 300] * 4  # 1200 bytes, no Content-Length

    response = httpx.post(limited + "/echo", content=chunks(), headers=JSON, timeout=10)
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert response.status_code == 413
    assert response.json() == {
        "detail": "request body is at least 1200 bytes, over the limit of 1000 bytes "
        "(max_body_bytes)"
    }


def test_chunked_body_under_limit_reaches_the_app_whole(limited):
    text = json.dumps({"queries": ["a" * 200, "b" * 300, "c" * 100]}).encode()

    def chunks():
        for i in range(0, len(text), 64):
            yield text[i : i + 64]

    response = httpx.post(limited + "/echo", content=chunks(), headers=JSON, timeout=10)
    assert (response.status_code, response.json()) == (200, {"n": 3, "chars": 600})


def test_body_at_exactly_the_limit_is_accepted(limited):
    text = json.dumps({"queries": ["a"]}).encode()
    text = text[:-1] + b" " * (LIMIT - len(text)) + b"}"
    assert len(text) == LIMIT
    response = httpx.post(limited + "/echo", content=text, headers=JSON, timeout=10)
    assert (response.status_code, response.json()) == (200, {"n": 1, "chars": 1})


def test_stalled_body_times_out_with_408(limited):
    status, headers, body, elapsed = raw_exchange(limited, post_head(100) + b'{"queries"')
    assert status == 408
    assert body == {
        "detail": "request body not complete within 0.5 s (body_timeout): got 10 of 100 bytes"
    }
    assert headers["connection"] == "close"
    assert TIMEOUT * 0.9 <= elapsed < TIMEOUT + 2


def test_slow_body_completed_within_the_deadline_is_served(limited):
    text = json.dumps({"queries": ["abc"]}).encode()
    head = post_head(len(text))[:-2] + b"Connection: close\r\n\r\n"
    status, _, body, elapsed = raw_exchange(limited, head + text[:5], text[5:], pause=0.2)
    assert (status, body) == (200, {"n": 1, "chars": 3})
    assert elapsed >= 0.2


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (
            b'{"queries": ["\xff"]}',
            "request body is not valid UTF-8: invalid start byte at byte 14",
        ),
        (
            b'{"queries":\n ["a",]}',
            "request body is not valid JSON: Expecting value: line 2 column 7 (char 18)",
        ),
        (
            b"[" * 100_000 + b"]" * 100_000,
            "request body is JSON nested deeper than the parser allows",
        ),
    ],
    ids=["utf8", "syntax", "nesting"],
)
def test_parse_errors_say_what_is_wrong(default_limits, content, detail):
    response = httpx.post(default_limits + "/echo", content=content, headers=JSON, timeout=10)
    assert response.status_code == 400
    assert response.json()["detail"].startswith(detail)


def test_nesting_message_names_the_limit(default_limits):
    content = b"[" * 100_000 + b"]" * 100_000
    response = httpx.post(default_limits + "/echo", content=content, headers=JSON, timeout=10)
    match = re.search(r"about (\d+) levels", response.json()["detail"])
    assert match is not None and int(match.group(1)) >= 100


def test_field_errors_keep_fastapi_422_naming_the_field(default_limits):
    response = httpx.post(default_limits + "/echo", json={"queries": "a"}, timeout=10)
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert (error["loc"], error["type"]) == (["body", "queries"], "list_type")


def test_other_http_errors_are_unchanged(default_limits):
    response = httpx.post(default_limits + "/refuse", timeout=10)
    assert (response.status_code, response.json()) == (400, {"detail": "refused by the endpoint"})
    response = httpx.get(default_limits + "/nowhere", timeout=10)
    assert (response.status_code, response.json()) == (404, {"detail": "Not Found"})


def test_middleware_rejects_bad_settings():
    with pytest.raises(ValueError, match="max_body_bytes must be >= 0, got -1"):
        BodyLimitMiddleware(FastAPI(), max_body_bytes=-1)
    with pytest.raises(ValueError, match="body_timeout must be > 0 seconds or None, got 0"):
        BodyLimitMiddleware(FastAPI(), body_timeout=0)
