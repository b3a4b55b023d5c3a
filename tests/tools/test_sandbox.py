"""SandboxTool against a real sandbox server on a loopback port (and a dead one)."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentrl.tools.execution import execute_tool_call
from agentrl.tools.loader import load_tools
from agentrl.tools.testing import check_tool_contract
from agentrl.utils.serving import serve_in_thread
from envs.sandbox.config import SandboxConfig
from envs.sandbox.server import create_app
from tools.sandbox import SandboxTool, format_run, run_code_url


@pytest.fixture(scope="module")
def sandbox_url():
    config = SandboxConfig(max_concurrent=4, uid_base=1_700_000, max_run_timeout=20)
    with serve_in_thread(create_app(config)) as url:
        yield url


def _tool(url: str, **config) -> SandboxTool:
    return SandboxTool({"sandbox_fusion_url": url, **config})


def _execute(tool: SandboxTool, code: str, timeout: float = 30.0):
    async def go():
        try:
            return await execute_tool_call(tool, "i0", {"code": code}, timeout=timeout)
        finally:
            await tool.aclose()

    return asyncio.run(go())


def _dead_url() -> str:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_contract_and_output(sandbox_url):
    report = asyncio.run(check_tool_contract(_tool(sandbox_url), {"code": "print(6 * 7)"}))
    assert report.response.text == "42"
    assert report.step_reward == 0.0
    assert report.metrics["sandbox_error"] == 0
    assert report.metrics["sandbox_timeout"] == 0
    assert 0.0 < report.metrics["sandbox_execution_time_s"] < 5.0
    assert "tool_error" not in report.metrics


def test_exception_shows_traceback_tail_and_exit_code(sandbox_url):
    response, reward, metrics = _execute(_tool(sandbox_url), "print('a')\nprint(1 / 0)")
    lines = response.text.splitlines()
    assert lines[0] == "a"
    assert lines[1] == "stderr:"
    assert lines[-2] == "ZeroDivisionError: division by zero"
    assert lines[-1] == "Error: exit code 1"
    assert (reward, metrics["sandbox_error"], metrics["sandbox_timeout"]) == (0.0, 1, 0)
    assert "tool_error" not in metrics and "infra_error" not in metrics  # the code's failure


def test_time_limit_is_reported_and_counted(sandbox_url):
    tool = _tool(sandbox_url, run_timeout=0.5)
    start = time.monotonic()
    response, _, metrics = _execute(tool, "while True: pass")
    assert time.monotonic() - start < 3.0
    assert response.text == (
        "Error: time limit exceeded. run_timeout of 0.5 s exceeded: the run was killed"
    )
    assert (metrics["sandbox_error"], metrics["sandbox_timeout"]) == (1, 1)
    assert "infra_error" not in metrics  # the model's code ran too long, the sandbox worked


def test_output_is_cut_for_the_model(sandbox_url):
    tool = _tool(sandbox_url, max_output_chars=100)
    response, _, _ = _execute(tool, "print('a' * 5000)")
    assert response.text == "a" * 100 + "\n...[4901 more characters cut]"


def test_no_output(sandbox_url):
    response, _, _ = _execute(_tool(sandbox_url), "x = 1")
    assert response.text == "(no output)"


def test_verl_config_keys_and_base_url(sandbox_url):
    tool = SandboxTool(
        {
            "type": "native",
            "sandbox_fusion_url": sandbox_url + "/run_code",
            "default_timeout": 3,
            "default_language": "python",
            "num_workers": 5,
            "enable_global_rate_limit": True,
            "memory_limit_mb": 512,
        }
    )
    assert (tool.url, tool.run_timeout, tool.max_concurrent, tool.memory_limit_mb) == (
        sandbox_url + "/run_code",
        3.0,
        5,
        512,
    )
    assert tool.timeout == 33.0
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20)"
    response, _, _ = _execute(tool, code)
    assert response.text == "512"


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="'sandbox_fusion_url' is required"):
        SandboxTool({})
    with pytest.raises(ValueError, match=r"unknown config keys \['run_timout'\]"):
        SandboxTool({"sandbox_fusion_url": "http://x", "run_timout": 3})
    with pytest.raises(ValueError, match="run_timeout must be > 0"):
        SandboxTool({"sandbox_fusion_url": "http://x", "run_timeout": 0})


def test_run_code_url():
    assert run_code_url("http://h:1") == "http://h:1/run_code"
    assert run_code_url("http://h:1/") == "http://h:1/run_code"
    assert run_code_url("http://h:1/run_code") == "http://h:1/run_code"


def test_loads_from_a_tool_config(sandbox_url):
    entry = {
        "class_name": "tools.sandbox.SandboxTool",
        "config": {"type": "native", "sandbox_fusion_url": sandbox_url},
        "tool_schema": {
            "type": "function",
            "function": {
                "name": "code_interpreter",
                "description": "Run Python code.",
                "parameters": {
                    "type": "object",
                    "properties": {"code": {"type": "string"}},
                    "required": ["code"],
                },
            },
        },
    }
    tools = load_tools([entry])
    response, _, _ = _execute(tools["code_interpreter"], "print('hi')")
    assert response.text == "hi"


def test_missing_code_is_an_argument_error(sandbox_url):
    async def go():
        return await execute_tool_call(_tool(sandbox_url), "i0", {}, timeout=5)

    response, _, metrics = asyncio.run(go())
    assert metrics["tool_error"] == "invalid_arguments"
    assert "'code' is a required property" in response.text


def test_dead_server_gives_error_text_and_metric():
    url = _dead_url()
    tool = _tool(url, max_retries=2, retry_backoff=0.01)
    start = time.monotonic()
    response, reward, metrics = _execute(tool, "print(1)")
    assert time.monotonic() - start < 2.0
    assert response.text == (
        f"Error: sandbox call failed: cannot connect to {url}/run_code: ConnectError "
        "(after 2 retries)"
    )
    assert (reward, metrics["tool_error"], metrics["sandbox_error"]) == (0.0, "connection", 1)
    assert metrics["infra_error"] == response.text.removeprefix("Error: ")


def test_a_crashed_sandbox_is_an_infrastructure_failure():
    """SandboxError (the sandbox, not the code, failed) and a 500 set infra_error."""
    app = FastAPI()

    @app.post("/run_code")
    async def run_code(request: Request):
        if "500" in (await request.json())["code"]:
            return JSONResponse({"detail": "worker died"}, status_code=500)
        return {"status": "SandboxError", "message": "sandbox namespace setup failed: EPERM"}

    with serve_in_thread(app) as url:
        tool = _tool(url, max_retries=0)
        response, _, metrics = _execute(tool, "print(1)")
        assert response.text == "Error: sandbox namespace setup failed: EPERM"
        assert metrics["tool_error"] == "sandbox_error"
        assert metrics["infra_error"] == "the sandbox failed: sandbox namespace setup failed: EPERM"
        _, _, metrics = _execute(tool, "print(500)")
        assert metrics["infra_error"] == (
            f"sandbox call failed: {url}/run_code answered HTTP 500 (after 0 retries)")


def test_rejected_request_is_not_retried(sandbox_url):
    tool = _tool(sandbox_url, language="cobol", max_retries=3, retry_backoff=5.0)
    start = time.monotonic()
    response, _, metrics = _execute(tool, "print(1)")
    assert time.monotonic() - start < 2.0  # a 4xx is final: no 5 s backoff
    assert metrics["tool_error"] == "http_status" and "infra_error" not in metrics
    assert response.text.startswith(
        f"Error: sandbox call failed: {sandbox_url}/run_code answered HTTP 400: ")
    assert "unsupported language 'cobol'" in response.text


@pytest.fixture()
def flaky_proxy(sandbox_url):
    """Answers 503 to the first two requests, then forwards to the real sandbox."""
    app = FastAPI()
    seen = []

    @app.post("/run_code")
    async def run_code(request: Request):
        seen.append(time.monotonic())
        if len(seen) <= 2:
            return JSONResponse({"detail": "busy"}, status_code=503)
        async with httpx.AsyncClient(timeout=30) as client:
            upstream = await client.post(f"{sandbox_url}/run_code", json=await request.json())
        return JSONResponse(upstream.json(), status_code=upstream.status_code)

    with serve_in_thread(app) as url:
        yield url, seen


def test_5xx_is_retried_with_backoff(flaky_proxy):
    url, seen = flaky_proxy
    tool = _tool(url, max_retries=3, retry_backoff=0.1)
    response, _, metrics = _execute(tool, "print('through')")
    assert response.text == "through"
    assert len(seen) == 3
    assert seen[1] - seen[0] >= 0.1 and seen[2] - seen[1] >= 0.2  # doubled
    assert "tool_error" not in metrics


def test_format_run_sandbox_error():
    body = {"status": "SandboxError", "message": "sandbox namespace setup failed: EPERM"}
    assert format_run(body, 100) == "Error: sandbox namespace setup failed: EPERM"
