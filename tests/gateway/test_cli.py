"""`agentrl gateway` refuses, before the backend loads the model, what it cannot serve: a
bad config, a --model that is no model directory or whose tokenizer does not load, an
address it cannot listen on, a tool config that does not load; one message, exit 2. (It
serving a model: tests/gateway/test_server.py, test_the_gateway_command_serves_the_model.)"""

from __future__ import annotations

import socket

import pytest

import agentrl.gateway.cli as gateway_cli
from agentrl.cli import main
from agentrl.utils.command import DEBUG_ENV


@pytest.fixture
def no_serving(monkeypatch):
    def served(*args, **kwargs):
        raise AssertionError("the backend loaded before the checks refused")

    monkeypatch.setattr(gateway_cli, "serve", served)
    monkeypatch.setenv(DEBUG_ENV, "")  # a leaked --debug would print tracebacks


def _refused(capsys, *argv: str) -> str:
    assert main(["gateway", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") <= 2, err
    return err.strip()


def test_what_it_cannot_serve_is_one_message_before_the_model_loads(
        tiny_model_dir, tmp_path, capsys, no_serving):
    model = str(tiny_model_dir)
    assert _refused(capsys, "--model", str(tmp_path)) == (
        f"--model {tmp_path} is not a Hugging Face model directory (no config.json)")
    (tmp_path / "config.json").write_text("{}")
    assert _refused(capsys, "--model", str(tmp_path)).startswith(
        f"--model {tmp_path}: cannot load its tokenizer: ")
    assert _refused(capsys, "--model", model, "nosuch.key=1").startswith(
        "invalid configuration:\n  - unknown config key nosuch")
    key = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
    assert _refused(capsys, "--model", model, f"{key}={tmp_path / 'nope.yaml'}") == (
        f"{key}: tool config file not found: {tmp_path / 'nope.yaml'}")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert _refused(capsys, "--model", model, "--port", str(port)).startswith(
            f"--host 127.0.0.1 --port {port}: cannot listen there (")


def test_a_port_out_of_range_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as done:
        main(["gateway", "--model", "m", "--port", "99999"])
    assert done.value.code == 2
    assert capsys.readouterr().err.endswith(
        "agentrl gateway: error: argument --port: 99999 is not a TCP port (0-65535)\n")
