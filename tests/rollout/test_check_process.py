"""The tokenization check's worker process and its pipe (agentrl/rollout/check_process.py)."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
import sys
import threading

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.check_process import main_not_rerun, receive, send_room, worker_main
from agentrl.rollout.token_check import run_check
from agentrl.testing.rollout import token_check_cases


def test_a_worker_whose_engine_stopped_first_ends_without_a_traceback(tiny_tokenizer):
    """An engine that closes before its worker is ready (a short evaluation): the worker's
    'ready' finds the pipe closed and the worker returns quietly (a BrokenPipeError
    traceback on the console before)."""
    engine_end, worker_end = multiprocessing.Pipe()
    engine_end.close()
    assert worker_main(worker_end, pickle.dumps(tiny_tokenizer), {}) is None
    engine_end, worker_end = multiprocessing.Pipe()
    engine_end.close()
    assert worker_main(worker_end, b"not a tokenizer", {}) is None  # its "failed" too


def test_the_worker_says_ready_then_answers_each_call_as_run_check_does(tiny_tokenizer):
    renderer = ChatRenderer(tiny_tokenizer)
    items = [req.check_input("strict")
             for req in token_check_cases(renderer, tiny_tokenizer).values()]  # fmt: skip
    engine_end, worker_end = multiprocessing.Pipe(duplex=True)
    worker = threading.Thread(target=worker_main,
                              args=(worker_end, pickle.dumps(tiny_tokenizer), {}))  # fmt: skip
    worker.start()

    async def call(payload: list) -> tuple:
        engine_end.send_bytes(pickle.dumps(payload))
        return pickle.loads(await receive(engine_end))

    async def talk() -> tuple:
        ready = pickle.loads(await receive(engine_end))
        return ready, await call(items), await call(items[:1])

    ready, answer, again = asyncio.run(talk())
    engine_end.close()
    worker.join(timeout=30)
    assert ready == ("ready", None)
    assert answer == ("results", [run_check(renderer, item) for item in items])
    assert again == ("results", answer[1][:1])
    assert not worker.is_alive()


def test_the_spawned_child_skips_the_main_module_and_the_spec_comes_back():
    main = sys.modules["__main__"]
    saved = getattr(main, "__spec__", None)
    with main_not_rerun():
        assert main.__spec__.name == "__main__" and main.__spec__.origin is None
    assert getattr(main, "__spec__", None) is saved


def test_the_send_room_is_half_the_pipes_buffer():
    engine_end, worker_end = multiprocessing.Pipe(duplex=True)
    import socket

    with socket.socket(fileno=engine_end.fileno()) as sock:
        buffer = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        sock.detach()
    assert send_room(engine_end) == buffer // 2 > 0
    engine_end.close()
    worker_end.close()
