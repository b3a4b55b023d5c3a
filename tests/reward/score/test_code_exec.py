"""The code-execution reward against the real sandbox server (started in-process), a stub
sandbox that counts calls in flight, and a dead URL."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from types import SimpleNamespace

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentrl.reward.loader import get_custom_reward_fn
from agentrl.reward.score import code_exec, default_compute_score
from agentrl.reward.score.code_exec import (
    compute_score,
    compute_score_batch,
    extract_code,
    parse_tests,
)
from agentrl.utils.serving import serve_in_thread
from envs.sandbox.config import SandboxConfig
from envs.sandbox.server import create_app

ADD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
STDIO = {"inputs": ["1 2\n", "10 20\n", "-5 5\n"], "outputs": ["3\n", "30\n", "0\n"]}


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\nDone."


@pytest.fixture(scope="module")
def sandbox_url():
    config = SandboxConfig(max_concurrent=4, uid_base=1_820_000, max_run_timeout=20)
    with serve_in_thread(create_app(config)) as url:
        yield url + "/run_code"


def _dead_url() -> str:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/run_code"


# --- parsing, no sandbox --------------------------------------------------------------


def test_extract_code_takes_the_last_python_block_and_skips_other_languages():
    text = "```python\nprint(1)\n```\nthen\n```cpp\nint main(){}\n```\n```py\nprint(2)\n```\n```text\nx\n```"
    assert extract_code(text) == "print(2)\n"
    assert extract_code("```\nprint(3)\n```") == "print(3)\n"
    assert extract_code("no code here") is None
    assert extract_code("```python\nprint(4)\n") is None  # never closed


def test_parse_tests_formats():
    stdio = parse_tests("s", json.dumps(STDIO))  # verl stores the truth as a JSON string
    assert [(t.kind, t.stdin, t.expected) for t in stdio][0] == ("stdio", "1 2\n", "3\n")
    call = parse_tests("s", {"fn_name": "f", "inputs": [[1, 2], "3\n4"], "outputs": [3, 7]})
    assert [json.loads(t.stdin) for t in call] == [[1, 2], [3, 4]]
    asserts = parse_tests("s", {"assert_case": ["assert f(1) == 2", "assert f(2) == 3"]})
    assert [t.kind for t in asserts] == ["assert", "assert"]
    mbpp = parse_tests("s", {"test_list": ["assert f(1) == 2"], "test_setup_code": "import math"})
    assert "import math\nassert f(1) == 2" in mbpp[0].code
    (humaneval,) = parse_tests("s", {"test": "def check(c):\n    assert c(1) == 2", "entry_point": "f"})
    assert humaneval.code.rstrip().endswith("check(f)")


@pytest.mark.parametrize(
    "truth, message",
    [
        ("{not json", "ground_truth is not valid JSON"),
        (["a"], "ground_truth must be a mapping of tests, got list"),
        ({"inputs": ["1"], "outputs": ["1", "2"]}, "has 1 'inputs' but 2 'outputs'"),
        ({"inputs": [], "outputs": []}, "no tests: 'inputs' is empty"),
        ({"inputs": "1"}, "field 'inputs' must be a list, got str"),
        ({"assert_case": []}, "no tests: 'assert_case' is empty"),
        ({"fn_name": "f", "inputs": ["{bad"], "outputs": [1]}, "is not JSON lines"),
    ],
)
def test_malformed_ground_truth_raises_naming_the_field(truth, message):
    with pytest.raises(ValueError, match=message):
        compute_score("apps", fenced("print(1)"), truth, sandbox_url=_dead_url())


def test_no_code_block_scores_zero_with_an_error_and_no_sandbox_call():
    result = compute_score("apps", "I think the answer is 3.", STDIO, sandbox_url=_dead_url())
    assert result == {"score": 0.0, "acc": 0.0, "tests_passed": 0, "tests_total": 3,
                      "error": "no ```python code block in the response"}


# --- the real sandbox -----------------------------------------------------------------


def test_correct_solution_passes_every_stdio_test(sandbox_url):
    result = compute_score("codecontests", ADD, STDIO, sandbox_url=sandbox_url)
    assert result == {"score": 1.0, "acc": 1.0, "tests_passed": 3, "tests_total": 3, "error": ""}


def test_output_compared_without_trailing_whitespace(sandbox_url):
    truth = {"inputs": ["2\n"], "outputs": ["1 2\n3 4"]}
    code = fenced("n = int(input())\nprint('1 2  ')\nprint('3 4')\nprint()")
    assert compute_score("apps", code, truth, sandbox_url=sandbox_url)["score"] == 1.0


def test_wrong_solution_scores_the_share_passed_or_zero_when_all_or_nothing(sandbox_url):
    wrong = fenced("a, b = map(int, input().split())\nprint(a + b if a > 0 else 99)")
    result = compute_score("apps", wrong, STDIO, sandbox_url=sandbox_url)
    assert (result["tests_passed"], result["tests_total"], result["acc"]) == (2, 3, 0.0)
    assert result["score"] == pytest.approx(2 / 3)
    assert result["error"] == ""  # a wrong answer is not a sandbox error
    strict = compute_score("apps", wrong, STDIO, sandbox_url=sandbox_url, all_or_nothing=True)
    assert strict["score"] == 0.0
    crash = compute_score("apps", fenced("raise SystemExit(3)"), STDIO, sandbox_url=sandbox_url)
    assert crash["score"] == 0.0


def test_call_based_tests_with_a_function_or_a_solution_class(sandbox_url):
    truth = {"fn_name": "twoSum", "inputs": [[[2, 7, 11], 9], [[1, 3], 4]], "outputs": [[[0, 1]], [0, 1]]}
    klass = "class Solution:\n    def twoSum(self, nums, target):\n" \
            "        print('debug output is ignored')\n" \
            "        seen = {}\n        for i, x in enumerate(nums):\n" \
            "            if target - x in seen:\n                return (seen[target - x], i)\n" \
            "            seen[x] = i"
    assert compute_score("taco", fenced(klass), truth, sandbox_url=sandbox_url)["acc"] == 1.0
    function = fenced("def twoSum(nums, target):\n    return [0, 0]")
    assert compute_score("taco", function, truth, sandbox_url=sandbox_url)["score"] == 0.0
    missing = compute_score("taco", fenced("x = 1"), truth, sandbox_url=sandbox_url)
    assert (missing["score"], missing["error"]) == (0.0, "")


def test_assert_style_tests(sandbox_url):
    truth = {"assert_case": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 5"]}
    result = compute_score("x", fenced("def add(a, b):\n    return a + b"), truth, sandbox_url=sandbox_url)
    assert (result["tests_passed"], result["tests_total"]) == (2, 3)
    humaneval = {"test": "def check(candidate):\n    assert candidate(3) == 9", "entry_point": "square"}
    good = compute_score("x", fenced("def square(x):\n    return x * x"), humaneval, sandbox_url=sandbox_url)
    assert good["acc"] == 1.0


def test_infinite_loop_times_out_within_the_per_test_timeout(sandbox_url):
    start = time.monotonic()
    result = compute_score("apps", fenced("while True:\n    pass"), {"inputs": ["", ""], "outputs": ["", ""]},
                           sandbox_url=sandbox_url, timeout=1.0)
    elapsed = time.monotonic() - start
    assert result["tests_passed"] == 0 and result["error"] == ""
    assert elapsed < 1.0 + 3.0, elapsed  # both tests run at once, each killed at 1 s


def test_usable_by_path_from_a_verl_config_and_by_data_source(sandbox_url, monkeypatch):
    config = SimpleNamespace(path="agentrl/reward/score/code_exec.py", name="compute_score",
                             reward_kwargs={"sandbox_url": sandbox_url, "timeout": 5})
    fn = get_custom_reward_fn(config)
    assert fn(data_source="apps", solution_str=ADD, ground_truth=STDIO, extra_info=None)["score"] == 1.0
    monkeypatch.setattr(code_exec, "DEFAULT_SANDBOX_URL", sandbox_url)
    assert default_compute_score("codeforces", ADD, json.dumps(STDIO))["acc"] == 1.0


def test_batched_form_by_module_path(sandbox_url):
    config = SimpleNamespace(path="agentrl.reward.score.code_exec", name="compute_score_batch",
                             reward_kwargs={"sandbox_url": sandbox_url})
    fn = get_custom_reward_fn(config)
    wrong = fenced("print(-1)")
    results = asyncio.run(fn(data_sources=["apps", "apps"], solution_strs=[ADD, wrong],
                             ground_truths=[STDIO, json.dumps(STDIO)], extra_infos=[None, None]))
    assert [r["score"] for r in results] == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"sample 1 \(data_source='taco'\): ground_truth is not valid"):
        asyncio.run(fn(data_sources=["apps", "taco"], solution_strs=[ADD, ADD],
                       ground_truths=[STDIO, "{bad"], extra_infos=[None, None]))


def test_called_from_a_running_event_loop(sandbox_url):
    async def go():
        return compute_score("apps", ADD, STDIO, sandbox_url=sandbox_url)

    assert asyncio.run(go())["score"] == 1.0


# --- a stub sandbox: concurrency bound and retries ------------------------------------


@pytest.fixture
def stub():
    """A /run_code that answers "3" after 0.1 s and records the most calls in flight."""
    app, state = FastAPI(), {"now": 0, "peak": 0, "calls": 0, "fail_first": 0}
    lock = threading.Lock()

    @app.post("/run_code")
    async def run_code(request: Request):
        await request.json()
        with lock:
            state["calls"] += 1
            if state["fail_first"] > 0:
                state["fail_first"] -= 1
                return JSONResponse({"detail": "busy"}, status_code=503)
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.1)
        with lock:
            state["now"] -= 1
        return {"status": "Success", "message": "",
                "run_result": {"status": "Finished", "return_code": 0, "stdout": "3\n", "stderr": ""}}

    with serve_in_thread(app) as url:
        yield SimpleNamespace(url=url, state=state)


def test_concurrency_bound_in_a_batch(stub):
    truth = {"inputs": ["1 2"] * 4, "outputs": ["3"] * 4}
    results = asyncio.run(compute_score_batch(["apps"] * 3, [ADD] * 3, [truth] * 3,
                                              sandbox_url=stub.url, max_concurrent=2))
    assert [r["tests_passed"] for r in results] == [4, 4, 4]
    assert stub.state["peak"] == 2


def test_concurrency_bound_shared_by_threads(stub):
    truth = {"inputs": ["1 2"] * 3, "outputs": ["3"] * 3}
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        compute_score("apps", ADD, truth, sandbox_url=stub.url, max_concurrent=3)))
        for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert [r["score"] for r in results] == [1.0] * 4
    assert stub.state["peak"] == 3


def test_http_503_is_retried(stub):
    stub.state["fail_first"] = 1
    result = compute_score("apps", ADD, {"inputs": ["1 2"], "outputs": ["3"]},
                           sandbox_url=stub.url, max_retries=2)
    assert (result["score"], stub.state["calls"]) == (1.0, 2)


# --- a dead sandbox -------------------------------------------------------------------


def test_unreachable_sandbox_scores_zero_with_an_error_and_a_warning(caplog):
    url = _dead_url()
    with caplog.at_level(logging.WARNING, logger="agentrl.reward.score.code_exec"):
        result = compute_score("apps", ADD, STDIO, sandbox_url=url, max_retries=1)
    assert (result["score"], result["acc"], result["tests_passed"]) == (0.0, 0.0, 0)
    assert "cannot connect to" in result["error"] and "(connection)" in result["error"]
    assert "cannot connect to" in caplog.text
    start = time.monotonic()  # the next sample fails fast instead of retrying again
    again = compute_score("apps", ADD, STDIO, sandbox_url=url, max_retries=3)
    assert time.monotonic() - start < 0.5
    assert "calls fail fast" in again["error"] and again["score"] == 0.0
