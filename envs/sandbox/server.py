"""The code sandbox HTTP server: SandboxFusion's ``POST /run_code`` for Python, and health.

    from envs.sandbox.server import create_app
    app = create_app(SandboxConfig(max_concurrent=8))      # uvicorn.run(app, port=8080)

    agentrl sandbox --port 8080 --max-concurrent 8          # the same from the shell

Request fields follow SandboxFusion (``code``, ``language``, ``run_timeout``, ``stdin``,
``memory_limit_MB``, ``files``; ``compile_timeout`` is accepted and unused), so verl's
sandbox-fusion client and ``tools/sandbox.py`` work against either server. The response is
SandboxFusion's ``{"status", "message", "compile_result", "run_result", "files", ...}`` plus
``isolation``: what this machine enforces (see docs/sandbox.md).
``agentrl.utils.serving.serve_in_thread`` runs the app on a loopback port in a background
thread (tests, benchmarks).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
from collections.abc import Coroutine
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from agentrl.utils.http_limits import harden
from envs.sandbox.cleanup import clean_up_after_crashed_servers
from envs.sandbox.config import SandboxConfig
from envs.sandbox.isolation import check_required, probe_isolation
from envs.sandbox.runner import QueueFullError, RunResult, SandboxRunner
from envs.sandbox.spec import CODE_FILE, Isolation
from envs.sandbox.uid_range import claim_uid_range

logger = logging.getLogger(__name__)

LANGUAGES = ("python", "python3")
DISCONNECT_POLL_SECONDS = 0.25
FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class RunCodeRequest(BaseModel):
    """SandboxFusion's RunCodeRequest (the fields a Python run uses)."""

    model_config = ConfigDict(extra="ignore")

    code: str
    language: str = "python"
    run_timeout: float | None = Field(None, description="wall-clock seconds; server default")
    compile_timeout: float | None = Field(None, description="accepted; Python is not compiled")
    memory_limit_MB: int | None = Field(None, description="address space, MiB; <= 0: default")
    stdin: str | None = None
    files: dict[str, str | None] = Field(default_factory=dict, description="name -> base64")
    fetch_files: list[str] = Field(default_factory=list, description="not supported")


def _bad_request(message: str, status_code: int = 400) -> HTTPException:
    return HTTPException(status_code=status_code, detail=message)


def _decode_files(files: dict[str, str | None], config: SandboxConfig) -> dict[str, bytes]:
    if len(files) > config.max_files:
        raise _bad_request(
            f"files: {len(files)} files, over max_files={config.max_files}", status_code=413
        )
    decoded = {}
    for name, content in files.items():
        if not FILE_NAME.match(name) or name == CODE_FILE:
            raise _bad_request(
                f"files: bad name {name!r}: plain names only (letters, digits, _ . -), "
                f"not {CODE_FILE!r}"
            )
        try:
            decoded[name] = base64.b64decode(content or "", validate=True)
        except binascii.Error as e:
            raise _bad_request(f"files[{name!r}] is not valid base64: {e}") from e
    return decoded


def _utf8_size(text: str, field: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as e:  # a lone surrogate escaped in the JSON
        raise _bad_request(f"{field} is not valid UTF-8 text: {e.reason} at {e.start}") from e


def _check_request(req: RunCodeRequest, config: SandboxConfig) -> tuple[float, dict]:
    """Validate what pydantic cannot; returns (run_timeout, decoded files)."""
    if req.language not in LANGUAGES:
        raise _bad_request(
            f"unsupported language {req.language!r}: this sandbox runs {', '.join(LANGUAGES)}"
        )
    run_timeout = config.default_run_timeout if req.run_timeout is None else req.run_timeout
    if not 0 < run_timeout <= config.max_run_timeout:
        raise _bad_request(
            f"run_timeout must be in (0, {config.max_run_timeout:g}] seconds, got {run_timeout}"
        )
    if req.fetch_files:
        raise _bad_request("fetch_files is not supported: the run's directory is private")
    files = _decode_files(req.files, config)
    size = _utf8_size(req.code, "code") + _utf8_size(req.stdin or "", "stdin")
    size += sum(len(d) + len(name.encode()) for name, d in files.items())
    if size > config.max_code_bytes:
        raise _bad_request(
            f"code + stdin + files (names included) is {size} bytes, over "
            f"max_code_bytes={config.max_code_bytes}",
            status_code=413,
        )
    return run_timeout, files


def _response(result: RunResult, isolation: Isolation) -> dict:
    if result.sandbox_error is not None:
        status = "SandboxError"
    elif result.status == "Finished" and result.return_code == 0:
        status = "Success"
    else:
        status = "Failed"
    return {
        "status": status,
        "message": result.message,
        "compile_result": None,
        "run_result": {
            "status": result.status,
            "execution_time": result.execution_time,
            "return_code": result.return_code,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "stdout_truncated": result.stdout_truncated,
            "stderr_truncated": result.stderr_truncated,
        },
        "executor_pod_name": None,
        "files": {},
        "isolation": isolation.as_dict(),
    }


def create_app(config: SandboxConfig | None = None, isolation: Isolation | None = None) -> FastAPI:
    """The FastAPI app. Probes the machine's isolation (well under a second) unless given."""
    config, uids = claim_uid_range((config or SandboxConfig()).validate())
    clean_up_after_crashed_servers(config)  # only this server's uids: the claim holds them
    isolation = isolation or probe_isolation(config)
    check_required(config, isolation)
    runner = SandboxRunner(config, isolation)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        runner.close()
        if uids is not None:
            uids.release()

    app = FastAPI(title="agentrl sandbox", description="SandboxFusion-compatible Python runner",
                  lifespan=lifespan)
    # bodies over max_body_bytes: 413; not received within body_timeout: 408; unparsable
    # bodies: 400 saying what is wrong (agentrl/utils/http_limits.py)
    harden(app, max_body_bytes=config.max_body_bytes, body_timeout=config.body_timeout)
    app.state.runner = runner

    @app.get("/health")
    async def health() -> dict:
        return {
            "status": "ok",
            "languages": list(LANGUAGES),
            "isolation": isolation.as_dict(),
            "notes": list(isolation.notes),
            "python": isolation.python,
            "limits": config.limits(),
            "busy_slots": runner.busy,
            "queue_depth": runner.waiting,
        }

    @app.post("/run_code")
    async def run_code(req: RunCodeRequest, request: Request) -> dict:
        run_timeout, files = _check_request(req, config)
        memory = req.memory_limit_MB if req.memory_limit_MB and req.memory_limit_MB > 0 else None
        try:
            result = await _unless_disconnected(
                request, runner.run(req.code, run_timeout, memory, req.stdin, files)
            )
        except QueueFullError as e:
            raise _bad_request(str(e), status_code=503) from e
        if result is None:  # the client went away: its run was cancelled
            return JSONResponse({"detail": "client disconnected"}, status_code=499)
        if result.sandbox_error is not None:
            logger.warning("sandbox could not run the code: %s", result.sandbox_error)
        return _response(result, isolation)

    return app


async def _unless_disconnected(request: Request, work: Coroutine) -> Any:
    """Await ``work``; if the client disconnects first, cancel it (the run is killed) and
    return None. A tool that gave up (its own timeout) closes its connection, so abandoned
    runs stop at once instead of holding a slot."""
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_SECONDS)
            if not task.done() and await request.is_disconnected():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                logger.info("sandbox: client disconnected, its run was stopped")
                return None
        return task.result()
    finally:
        if not task.done():  # this handler itself was cancelled
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
