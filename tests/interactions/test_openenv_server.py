"""An OpenEnv server app in a child process: ready when /health answers, stopped on
request; one that cannot import or never answers is an error quoting its log."""

from __future__ import annotations

import httpx
import pytest

from agentrl.interactions.openenv_server import app_path, start_server

HEALTHY = """
from fastapi import FastAPI
app = FastAPI()
other = FastAPI()

@app.get("/health")
def health():
    return {"status": "healthy"}
"""


@pytest.fixture
def apps(tmp_path, monkeypatch):
    (tmp_path / "tiny_app.py").write_text(HEALTHY)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_the_server_answers_and_stops(apps):
    server = start_server("tiny_app", timeout=30)
    assert httpx.get(f"{server.base_url}/health").json() == {"status": "healthy"}
    server.stop()
    assert server.process.returncode is not None
    server.stop()  # a second stop does nothing
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.base_url}/health")


def test_a_module_that_cannot_be_imported_is_named_with_its_log(apps):
    with pytest.raises(RuntimeError, match=r'(?s)no_such_module:app exited.*"no_such_module"'):
        start_server("no_such_module", timeout=30)


def test_a_server_without_health_times_out(apps):
    with pytest.raises(RuntimeError, match=r"tiny_app:other did not answer /health within 1s"):
        start_server("tiny_app:other", timeout=1)


def test_the_app_path_defaults_to_app():
    assert app_path(" pkg.server.app ") == "pkg.server.app:app"
    assert app_path("pkg.mod:make") == "pkg.mod:make"
