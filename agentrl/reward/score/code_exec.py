"""Code-execution reward: run the response's last Python code block against unit tests in a
SandboxFusion-compatible sandbox (``agentrl sandbox``, envs/sandbox, or a SandboxFusion
deployment) and score the share of tests it passes.

    compute_score(data_source, solution_str, ground_truth, extra_info=None,
                  sandbox_url="http://127.0.0.1:8080/run_code", max_concurrent=32,
                  timeout=10.0, memory_limit_mb=1024, max_retries=3, all_or_nothing=False)
    -> {"score": float, "acc": float, "tests_passed": int, "tests_total": int, "error": str}

Usable by name from a verl config (``custom_reward_function.path=agentrl/reward/score/
code_exec.py``, ``name=compute_score``, settings in ``custom_reward_function.reward_kwargs``)
and registered for verl's code data sources (``codecontests``, ``apps``, ``codeforces``,
``taco``) with the default settings. ``compute_score_batch`` is the same for
``reward_model.reward_manager=batch``: every test of every sample runs concurrently, under
the same bound.

``ground_truth`` (a dict or its JSON string) is one of verl's test formats:

- ``{"inputs": [...], "outputs": [...]}``: stdin/stdout cases (CodeContests, APPS, TACO,
  PrimeIntellect). Each input is the program's stdin; it passes when its stdout equals the
  output, compared line by line with trailing whitespace and trailing blank lines ignored
  (verl strips only trailing newlines, so whatever verl accepts passes here too).
- the same with ``"fn_name"``: call-based cases (LeetCode-style APPS/TACO). Each input is
  the list of positional arguments (or a string of one JSON argument per line, verl's
  form); the function ``fn_name`` (or ``Solution().fn_name``) is called and its result,
  JSON round-tripped so tuples read as lists, must equal the output or, APPS's rule, the
  output's only element.
- ``{"assert_case": [...]}`` (verl) or ``{"test_list": [...]}`` (MBPP, with optional
  ``test_setup_code``): each assert snippet runs after the solution; it passes when the
  program exits with 0.
- ``{"test": "...", "entry_point": "f"}`` (HumanEval): one test, ``check(f)`` is appended
  when the test does not call it.

Scoring is verl's ``sandbox_fusion.compute_score``: ``score`` is the share of tests passed
(``all_or_nothing=True`` makes it 1/0); ``acc`` is 1.0 only when every test passed (pass@1).
Where we depart from verl: its built-in dispatch scores only the first 10 tests
(``continuous=True``); we run and count all of them.

Each test is one ``POST /run_code`` with ``run_timeout=timeout`` (the sandbox kills the run
at that wall-clock time; ``agentrl sandbox`` refuses more than its ``--max-run-timeout``,
60 s by default) and ``memory_limit_MB=memory_limit_mb``. At most ``max_concurrent`` calls
are in flight per process, across threads and event loops (calls with the same value
share one bound); connection errors, 429 and 5xx are retried ``max_retries`` times with
backoff (agentrl.utils.http). A sandbox that cannot be used (unreachable, an HTTP error,
``SandboxError``) fails that test and fills ``error``; it is logged as a warning and never
raised, so a dead sandbox scores 0 instead of ending the batch. After a connection failure
the calls to that URL fail at once for ``DOWN_SECONDS`` (10 s), so a dead sandbox costs one
retry chain rather than one per sample. A response without a code block scores 0 with
``error`` saying so. A malformed ``ground_truth`` is a dataset bug and raises ``ValueError``
naming the field (the reward manager adds the sample).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.utils.aio import run_sync
from agentrl.utils.http import HTTPCallError, JSONClient, RetryPolicy

logger = logging.getLogger(__name__)

DATA_SOURCES = ("codecontests", "apps", "codeforces", "taco")
DEFAULT_SANDBOX_URL = "http://127.0.0.1:8080/run_code"
HTTP_TIMEOUT_SLACK = 30.0  # the server may queue a run before it starts
DOWN_SECONDS = 10.0  # after a connection failure, calls to that URL fail fast this long
_PYTHON_FENCES = ("", "python", "python3", "py")
_RESULT_MARKER = "__agentrl_code_exec_result__:"
_CALL_WRAPPER = """{solution}

def _agentrl_call():
    import json as _json
    import sys as _sys
    _args = _json.loads(_sys.stdin.read())
    _name = {fn_name!r}
    _fn = globals().get(_name)
    if _fn is None and "Solution" in globals():
        _fn = getattr(globals()["Solution"](), _name)
    if _fn is None:
        raise NameError(f"function {{_name!r}} is not defined")
    _result = _fn(*_args)
    _sys.stdout.write("\\n{marker}" + _json.dumps(_result, default=repr) + "\\n")

_agentrl_call()
"""


@dataclass(frozen=True)
class CodeTest:
    """One sandbox run: the program, its stdin, and how its answer is judged."""

    code: str
    stdin: str | None = None
    expected: Any = None
    kind: str = "assert"  # "stdio": compare stdout; "call": compare the result; "assert": exit 0


@dataclass(frozen=True)
class Settings:
    url: str
    max_concurrent: int
    timeout: float
    memory_limit_mb: int
    max_retries: int


# One bound per process (per max_concurrent value), shared by every thread and event loop.
_LIMITS: dict[int, threading.BoundedSemaphore] = {}
_LIMITS_LOCK = threading.Lock()
# url -> (time.monotonic() until which calls fail fast, why): a dead sandbox costs one
# retry chain, not one per test of every sample (the naive manager scores one at a time).
_DOWN: dict[str, tuple[float, str]] = {}


def extract_code(solution_str: str) -> str | None:
    """The last fenced Python block (```python, ```py, ```python3 or a bare ```), or None.

    Fences are read line by line, so a block in another language is skipped whole."""
    blocks, lang, lines = [], None, []
    for line in solution_str.splitlines():
        fence = line.strip().startswith("```")
        if lang is None and fence:
            lang, lines = line.strip()[3:].strip().lower(), []
        elif lang is not None and fence:
            if lang in _PYTHON_FENCES:
                blocks.append("\n".join(lines) + "\n")
            lang = None
        elif lang is not None:
            lines.append(line)
    return blocks[-1] if blocks else None


def parse_tests(solution: str, ground_truth: Any) -> list[CodeTest]:
    """The test programs for ``solution``; ``ValueError`` names what is wrong with the truth."""
    truth = ground_truth
    if isinstance(truth, (str, bytes)):
        try:
            truth = json.loads(truth)
        except json.JSONDecodeError as err:
            raise ValueError(f"ground_truth is not valid JSON: {err.msg}") from None
    if not isinstance(truth, dict):
        raise ValueError(f"ground_truth must be a mapping of tests, got {type(truth).__name__}")
    if truth.get("assert_case") is not None or truth.get("test_list") is not None:
        key = "assert_case" if truth.get("assert_case") is not None else "test_list"
        setup = str(truth.get("test_setup_code") or "")
        cases = _list(truth, key)
        if not cases:
            raise ValueError(f"ground_truth has no tests: {key!r} is empty")
        return [CodeTest(f"{solution}\n\n{setup}\n{case}\n") for case in cases]
    if truth.get("test") is not None:
        test, entry = str(truth["test"]), truth.get("entry_point")
        if entry and f"check({entry})" not in test:
            test += f"\n\ncheck({entry})\n"
        return [CodeTest(f"{solution}\n\n{test}\n")]
    inputs, outputs = _list(truth, "inputs"), _list(truth, "outputs")
    if len(inputs) != len(outputs):
        raise ValueError(f"ground_truth has {len(inputs)} 'inputs' but {len(outputs)} 'outputs'")
    if not inputs:
        raise ValueError("ground_truth has no tests: 'inputs' is empty")
    fn_name = truth.get("fn_name")
    pairs = list(zip(inputs, outputs, strict=True))
    if fn_name:
        code = _CALL_WRAPPER.format(solution=solution, fn_name=str(fn_name), marker=_RESULT_MARKER)
        return [CodeTest(code, json.dumps(_call_args(x)), y, "call") for x, y in pairs]
    return [CodeTest(solution, _text(x), _text(y), "stdio") for x, y in pairs]


def _list(truth: dict, key: str) -> list:
    value = truth.get(key)
    if not isinstance(value, (list, tuple)):
        known = "inputs/outputs, assert_case, test_list or test"
        raise ValueError(f"ground_truth field {key!r} must be a list, got "
                         f"{type(value).__name__} (test formats: {known})")
    return list(value)


def _text(value: Any) -> str:
    """stdin or expected stdout as text: a list is one item per line."""
    if isinstance(value, (list, tuple)):
        return "\n".join(str(v) for v in value)
    return str(value)


def _call_args(value: Any) -> list:
    """Positional arguments: a list as is; a string holds one JSON argument per line (verl)."""
    if isinstance(value, str):
        try:
            return [json.loads(line) for line in value.splitlines() if line.strip()]
        except json.JSONDecodeError as err:
            raise ValueError(f"ground_truth call input {value[:80]!r} is not JSON lines: "
                             f"{err.msg}") from None
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _same_stdout(actual: str, expected: str) -> bool:
    def lines(text: str) -> list[str]:
        out = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while out and not out[-1]:
            out.pop()
        return out

    return lines(actual) == lines(expected)


def _same_result(stdout: str, expected: Any) -> bool:
    at = stdout.rfind(_RESULT_MARKER)
    if at < 0:
        return False
    try:
        result = json.loads(stdout[at + len(_RESULT_MARKER):].strip())
    except json.JSONDecodeError:
        return False
    expected = json.loads(json.dumps(expected, default=repr))  # tuples -> lists, as the result
    if result == expected:
        return True
    return isinstance(expected, list) and len(expected) == 1 and result == expected[0]


def judge(test: CodeTest, body: dict) -> bool:
    """Whether one ``/run_code`` answer passes ``test``."""
    run = body.get("run_result") or {}
    if body.get("status") != "Success" or run.get("status") != "Finished":
        return False
    stdout = str(run.get("stdout") or "")
    if test.kind == "stdio":
        return _same_stdout(stdout, test.expected)
    if test.kind == "call":
        return _same_result(stdout, test.expected)
    return True


def _process_limit(max_concurrent: int) -> threading.BoundedSemaphore:
    with _LIMITS_LOCK:
        return _LIMITS.setdefault(max_concurrent, threading.BoundedSemaphore(max_concurrent))


async def _acquire(semaphore: threading.BoundedSemaphore) -> None:
    # Polled rather than acquired in an executor thread: a blocked executor thread per
    # waiting test could starve the default executor; a sandbox call takes >= tens of ms.
    delay = 0.001
    while not semaphore.acquire(blocking=False):
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)


async def _run_test(client: JSONClient, settings: Settings, test: CodeTest) -> tuple[bool, str]:
    """(passed, sandbox error or "") for one test; never raises HTTP errors."""
    payload = {
        "code": test.code,
        "language": "python",
        "run_timeout": settings.timeout,
        "memory_limit_MB": settings.memory_limit_mb,
    }
    if test.stdin is not None:
        payload["stdin"] = test.stdin
    down = _DOWN.get(settings.url)
    if down is not None and time.monotonic() < down[0]:
        return False, down[1]
    semaphore = _process_limit(settings.max_concurrent)
    await _acquire(semaphore)
    try:
        body, _ = await client.post_json(settings.url, payload)
    except HTTPCallError as err:
        why = f"sandbox call failed ({err.kind}): {err}"
        if err.kind == "connection":
            _DOWN[settings.url] = (time.monotonic() + DOWN_SECONDS,
                                   f"{why}; calls fail fast for {DOWN_SECONDS:g} s")
        return False, why
    finally:
        semaphore.release()
    _DOWN.pop(settings.url, None)
    if not isinstance(body, dict) or "status" not in body:
        return False, "sandbox call failed (bad_response): the answer has no 'status'"
    if body["status"] == "SandboxError":
        return False, f"sandbox error: {body.get('message') or 'no message'}"
    return judge(test, body), ""


def _result(passed: list[bool], errors: list[str], all_or_nothing: bool,
            error: str = "") -> dict[str, Any]:
    total, ok = len(passed), sum(passed)
    acc = float(total > 0 and ok == total)
    failed = [e for e in errors if e]
    if failed and not error:
        error = failed[0] if len(failed) == total else (
            f"{len(failed)} of {total} tests could not run: {failed[0]}")
    share = ok / total if total else 0.0
    return {"score": acc if all_or_nothing else share, "acc": acc, "tests_passed": ok,
            "tests_total": total, "error": error}


def _settings(sandbox_url: str | None, sandbox_fusion_url: str | None, max_concurrent: int,
              timeout: float, memory_limit_mb: int, max_retries: int) -> Settings:
    url = str(sandbox_url or sandbox_fusion_url or DEFAULT_SANDBOX_URL).rstrip("/")
    url = url if url.endswith("/run_code") else url + "/run_code"
    if int(max_concurrent) < 1 or float(timeout) <= 0 or int(max_retries) < 0:
        raise ValueError(f"code_exec: need max_concurrent >= 1, timeout > 0, max_retries >= 0; "
                         f"got {max_concurrent}, {timeout}, {max_retries}")
    return Settings(url, int(max_concurrent), float(timeout), int(memory_limit_mb),
                    int(max_retries))


def _client(settings: Settings) -> JSONClient:
    return JSONClient(timeout=settings.timeout + HTTP_TIMEOUT_SLACK,
                      max_concurrent=settings.max_concurrent,
                      retry=RetryPolicy(max_retries=settings.max_retries))


async def _score(client: JSONClient, settings: Settings, solution_str: str, ground_truth: Any,
                 all_or_nothing: bool) -> dict[str, Any]:
    code = extract_code(solution_str)
    tests = parse_tests(code or "", ground_truth)  # a bad ground truth raises even then
    if code is None:
        return _result([False] * len(tests), [], all_or_nothing,
                       error="no ```python code block in the response")
    outcomes = await asyncio.gather(*(_run_test(client, settings, t) for t in tests))
    errors = [e for _, e in outcomes]
    result = _result([p for p, _ in outcomes], errors, all_or_nothing)
    if any(errors):
        logger.warning("code_exec: %s", result["error"])
    return result


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    *,
    sandbox_url: str | None = None,
    max_concurrent: int = 32,
    timeout: float = 10.0,
    memory_limit_mb: int = 1024,
    max_retries: int = 3,
    all_or_nothing: bool = False,
    sandbox_fusion_url: str | None = None,
) -> dict[str, Any]:
    """Run the response's last code block against ``ground_truth``'s tests in the sandbox.

    ``sandbox_url``: ``.../run_code`` or the server's base URL (verl's ``sandbox_fusion_url``
    is accepted too); ``max_concurrent``: sandbox calls in flight per process; ``timeout``:
    seconds per test; ``memory_limit_mb``: address space of the program; ``max_retries``:
    retries of a call on connection errors, 429 and 5xx; ``all_or_nothing``: score 1/0
    instead of the share passed. Returns ``{"score", "acc", "tests_passed", "tests_total",
    "error"}``.
    """
    settings = _settings(sandbox_url, sandbox_fusion_url, max_concurrent, timeout,
                         memory_limit_mb, max_retries)

    async def score() -> dict[str, Any]:
        client = _client(settings)  # an httpx client belongs to one event loop
        try:
            return await _score(client, settings, solution_str, ground_truth, all_or_nothing)
        finally:
            await client.aclose()

    return run_sync(score())  # in a thread when called from inside an event loop


async def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict | None] | None = None,
    *,
    sandbox_url: str | None = None,
    max_concurrent: int = 32,
    timeout: float = 10.0,
    memory_limit_mb: int = 1024,
    max_retries: int = 3,
    all_or_nothing: bool = False,
    sandbox_fusion_url: str | None = None,
) -> list[dict[str, Any]]:
    """The batched form for ``reward_manager=batch``: one result dict per sample."""
    settings = _settings(sandbox_url, sandbox_fusion_url, max_concurrent, timeout,
                         memory_limit_mb, max_retries)
    client = _client(settings)

    async def one(i: int, solution: str, truth: Any) -> dict[str, Any]:
        try:
            return await _score(client, settings, solution, truth, all_or_nothing)
        except ValueError as err:  # a malformed ground truth: say which sample
            raise ValueError(f"sample {i} (data_source={data_sources[i]!r}): {err}") from None

    try:
        return list(await asyncio.gather(*(
            one(i, solution, truth)
            for i, (solution, truth) in enumerate(zip(solution_strs, ground_truths, strict=True))
        )))
    finally:
        await client.aclose()
