"""Code sandbox tool: runs the model's Python in a sandbox server and shows it the output.

Parameters ``{"code": string}`` as verl's sandbox-fusion tool. The code is POSTed to a
SandboxFusion-compatible ``/run_code`` (``agentrl sandbox``, envs/sandbox, or a SandboxFusion
deployment). The model sees stdout, then stderr (tracebacks keep their last lines), then
one ``Error: ...`` line when the run did not finish cleanly, e.g.

    42
    stderr:
    Traceback (most recent call last): ... ZeroDivisionError: division by zero
    Error: exit code 1

Tool config keys (verl's names where verl has one):

    sandbox_fusion_url   .../run_code, or the server's base URL (required)
    run_timeout          wall-clock seconds the code may run (10); verl: default_timeout
    timeout              seconds per HTTP request (run_timeout + 30: the server may queue)
    memory_limit_mb      address space of the code, MiB (1024)
    language             "python"; verl: default_language
    max_concurrent       requests in flight per tool object, i.e. per process (32);
                         verl's num_workers / rate_limit are read as this
    max_output_chars     stdout and stderr are each cut to this for the model (2000)
    max_retries          retries on connection errors, 429 and 5xx only (3)
    retry_backoff        first retry delay in seconds, doubled each retry (0.5)
    retry_backoff_max    cap on one retry delay (8)

verl's ``enable_global_rate_limit`` is accepted and ignored (the limit is per process).
Metrics of every call: ``sandbox_timeout`` and ``sandbox_error`` (0/1: the run hit its time
limit / did not succeed, whatever the reason), ``sandbox_execution_time_s``; when the sandbox
itself failed (unreachable, HTTP error, bad answer, SandboxError) also ``tool_error`` naming
the kind, and ``infra_error`` when it was the sandbox's failure (unreachable, timed out,
429/5xx, not JSON, SandboxError), not the code's: an infrastructure failure that
``rollout.on_infra_error`` keeps out of training (docs/rollout.md). Nothing is raised. The ``httpx.AsyncClient`` is created lazily on first use (one per
event loop) and closed by ``aclose()``.
"""

from __future__ import annotations

import logging
from typing import Any

from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse
from agentrl.utils.http import HTTPCallError, JSONClient, RetryPolicy

logger = logging.getLogger(__name__)

DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": (
            "Run Python 3 code in a sandbox and return what it prints (stdout and stderr). "
            "Each call starts fresh: no state, files or network carry over. Print results."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run."}},
            "required": ["code"],
        },
    },
}

DEFAULTS: dict[str, Any] = {
    "run_timeout": 10.0,
    "timeout": None,
    "memory_limit_mb": 1024,
    "language": "python",
    "max_concurrent": 32,
    "max_output_chars": 2000,
    "max_retries": 3,
    "retry_backoff": 0.5,
    "retry_backoff_max": 8.0,
}
# verl's sandbox-fusion tool keys, read as ours so a verl tool YAML works unchanged.
VERL_ALIASES = {
    "default_timeout": "run_timeout",
    "default_language": "language",
    "num_workers": "max_concurrent",
    "rate_limit": "max_concurrent",
}
IGNORED_KEYS = {"type", "enable_global_rate_limit"}
HTTP_TIMEOUT_SLACK = 30.0

def run_code_url(url: str) -> str:
    """verl's configs give the full ``.../run_code`` URL; a base URL gets the path added."""
    url = url.rstrip("/")
    return url if url.endswith("/run_code") else url + "/run_code"


def clip_head(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n...[{len(text) - limit} more characters cut]"


def clip_tail(text: str, limit: int) -> str:
    """Keep the end: a traceback's last lines name the error."""
    if len(text) <= limit:
        return text
    return f"...[{len(text) - limit} characters cut]...\n" + text[-limit:]


def _failure_reason(body: dict, run: dict) -> str | None:
    """One line saying why a run did not succeed, or None when it did."""
    if body.get("status") == "Success":
        return None
    message = str(body.get("message") or "").strip()
    if run.get("status") == "TimeLimitExceeded":
        return f"time limit exceeded. {message}".strip()
    if message:
        return message
    if run.get("return_code") not in (None, 0):
        return f"exit code {run['return_code']}"
    return f"the sandbox reported status {body.get('status')!r}"


def format_run(body: dict, max_chars: int) -> str:
    """What the model sees of one ``/run_code`` answer."""
    run = body.get("run_result") or {}
    stdout = str(run.get("stdout") or "")
    stderr = str(run.get("stderr") or "")
    parts = []
    if stdout:
        parts.append(clip_head(stdout, max_chars).rstrip("\n"))
    if stderr:
        parts.append("stderr:\n" + clip_tail(stderr, max_chars).rstrip("\n"))
    reason = _failure_reason(body, run)
    if reason is not None:
        parts.append(f"Error: {reason}")
    return "\n".join(parts) if parts else "(no output)"


class SandboxTool(BaseTool):
    """Runs ``{"code": ...}`` on ``sandbox_fusion_url`` and returns its output."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        schema = tool_schema or OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)
        super().__init__(config, schema)
        known = set(DEFAULTS) | set(VERL_ALIASES) | IGNORED_KEYS | {"sandbox_fusion_url"}
        unknown = set(self.config) - known
        if unknown:
            raise ValueError(f"sandbox tool: unknown config keys {sorted(unknown)}")
        if not self.config.get("sandbox_fusion_url"):
            raise ValueError("sandbox tool: config 'sandbox_fusion_url' is required")
        aliases = {VERL_ALIASES[k]: v for k, v in self.config.items() if k in VERL_ALIASES}
        settings = {**DEFAULTS, **aliases, **self.config}
        self.url = run_code_url(str(settings["sandbox_fusion_url"]))
        self.run_timeout = float(settings["run_timeout"])
        timeout = settings["timeout"]
        self.timeout = float(timeout) if timeout else self.run_timeout + HTTP_TIMEOUT_SLACK
        self.memory_limit_mb = int(settings["memory_limit_mb"])
        self.language = str(settings["language"])
        self.max_concurrent = int(settings["max_concurrent"])
        self.max_output_chars = int(settings["max_output_chars"])
        for name in ("run_timeout", "timeout", "max_concurrent", "max_output_chars"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox tool: {name} must be > 0, got {getattr(self, name)}")
        self._http = JSONClient(
            timeout=self.timeout,
            max_concurrent=self.max_concurrent,
            retry=RetryPolicy(
                max_retries=int(settings["max_retries"]),
                backoff=float(settings["retry_backoff"]),
                backoff_max=float(settings["retry_backoff_max"]),
            ),
        )

    async def aclose(self) -> None:
        """Close the HTTP client (if it was made in the running loop)."""
        await self._http.aclose()

    async def _post(self, payload: dict[str, Any]) -> dict:
        """POST the run to the sandbox; the decoded answer, which must have a 'status'."""
        body, _ = await self._http.post_json(self.url, payload)
        if not isinstance(body, dict) or "status" not in body:
            raise HTTPCallError("bad_response", "the sandbox's answer has no 'status'")
        return body

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        code = parameters.get("code")
        if not isinstance(code, str) or not code.strip():
            text = "Error: 'code' must be a non-empty string of Python code."
            return ToolResponse(text=text), 0.0, {"tool_error": "invalid_arguments"}
        payload = {
            "code": code,
            "language": self.language,
            "run_timeout": self.run_timeout,
            "memory_limit_MB": self.memory_limit_mb,
        }
        try:
            body = await self._post(payload)
        except HTTPCallError as err:
            logger.warning("sandbox call failed: %s", err)
            metrics = {"tool_error": err.kind, "sandbox_error": 1, "sandbox_timeout": 0}
            if err.infra:  # the sandbox failed, not the model's code (agentrl/utils/infra.py)
                metrics["infra_error"] = f"sandbox call failed: {err}"
            return ToolResponse(text=f"Error: sandbox call failed: {err}"), 0.0, metrics
        run = body.get("run_result") or {}
        metrics: dict[str, Any] = {
            "sandbox_error": int(body.get("status") != "Success"),
            "sandbox_timeout": int(run.get("status") == "TimeLimitExceeded"),
            "sandbox_execution_time_s": float(run.get("execution_time") or 0.0),
        }
        if body.get("status") == "SandboxError":
            metrics["tool_error"] = "sandbox_error"
            metrics["infra_error"] = f"the sandbox failed: {body.get('message') or 'SandboxError'}"
        return ToolResponse(text=format_run(body, self.max_output_chars)), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """Always 0.0: the reward function, not the sandbox, scores the answer."""
        return 0.0
