"""Tests for agentrl/utils/infra.py: which exceptions are infrastructure failures."""

from __future__ import annotations

import asyncio
import socket
import urllib.error

import httpx
import pytest
import requests

from agentrl.utils.http import HTTPCallError
from agentrl.utils.infra import ON_INFRA_ERROR, InfraError, check_on_infra_error, is_infra_error


def _status_error(code: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://judge/v1")
    return httpx.HTTPStatusError("bad", request=request, response=httpx.Response(code,
                                                                                 request=request))


def _raised_from(cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as err:
            raise RuntimeError("search failed") from err
    except RuntimeError as wrapped:
        return wrapped


@pytest.mark.parametrize("err", [
    InfraError("the sandbox crashed"),
    TimeoutError(), asyncio.TimeoutError(), ConnectionRefusedError(111, "refused"),
    ConnectionResetError(), BrokenPipeError(), socket.gaierror("no such host"),
    httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("cut"),
    requests.ConnectionError("refused"), requests.Timeout("slow"),
    urllib.error.URLError("refused"), _status_error(500), _status_error(503), _status_error(429),
    HTTPCallError("connection", "down"), HTTPCallError("timeout", "slow"),
    HTTPCallError("http_status", "500", 500), HTTPCallError("bad_response", "<html>"),
    _raised_from(httpx.ConnectError("refused")),
])  # fmt: skip
def test_infrastructure_failures(err):
    assert is_infra_error(err)


@pytest.mark.parametrize("err", [
    ValueError("bad argument"), KeyError("x"), TypeError("dict * int"), RuntimeError("bug"),
    _status_error(400), _status_error(404), HTTPCallError("http_status", "400", 400),
    urllib.error.HTTPError("http://x", 404, "not found", {}, None),  # type: ignore[arg-type]
    _raised_from(ValueError("bad argument")),
])  # fmt: skip
def test_the_model_s_or_the_plugin_s_errors_are_not(err):
    assert not is_infra_error(err)


def test_an_exception_may_say_itself_and_the_mode_is_checked():
    class Flaky(Exception):
        infra = True

    class NotMine(OSError):  # an OSError is not by itself an infrastructure failure
        pass

    assert is_infra_error(Flaky()) and not is_infra_error(NotMine())
    assert ON_INFRA_ERROR[0] == "mask" and check_on_infra_error("raise") == "raise"
    with pytest.raises(ValueError, match="on_infra_error is 'drop'; choose one of mask, zero"):
        check_on_infra_error("drop")
