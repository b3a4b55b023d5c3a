"""serve_in_thread: a real server on a free port, stopped on exit, and the process's
logging left as it was (a run's log file keeps receiving records)."""

from __future__ import annotations

import logging

import httpx
from fastapi import FastAPI

from agentrl.utils.serving import serve_in_thread


def test_server_answers_and_log_handlers_stay_open(tmp_path):
    app = FastAPI()

    @app.get("/ping")
    def ping() -> dict:
        return {"ok": True}

    log_file = tmp_path / "run.log"
    handler = logging.FileHandler(log_file, mode="w")
    root = logging.getLogger()
    root.addHandler(handler)
    previous_level = root.level
    root.setLevel(logging.INFO)
    try:
        with serve_in_thread(app) as url:
            assert httpx.get(f"{url}/ping", timeout=5).json() == {"ok": True}
            logging.getLogger("agentrl.test").info("while serving")
        logging.getLogger("agentrl.test").info("after serving")
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(previous_level)
    text = log_file.read_text()
    assert "while serving" in text and "after serving" in text
    try:
        httpx.get(f"{url}/ping", timeout=1)
        raise AssertionError("the server still answers after the context")
    except httpx.HTTPError:
        pass
