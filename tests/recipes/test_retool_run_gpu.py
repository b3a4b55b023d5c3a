"""Tests for recipes/retool/run_gpu.sh without a GPU: the trainer is a stub
(AGENTRL_TRAIN_CMD); the sandbox is the real `agentrl sandbox`, started by the script, waited
for, sent a program by the stub through the tool config the script passed, and stopped. A
sandbox that exits or never answers stops the script with its log tail. After every run,
however it ends, no process the script started may be left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.utils.serving import serve_in_thread

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "recipes" / "retool" / "run_gpu.sh"

# The stub trainer: records its pid and arguments, runs a program in the sandbox named by the
# tool config it was given, leaves a child behind (a leaked worker), then does STUB_MODE.
STUB = r"""#!/usr/bin/env bash
set -euo pipefail
echo $$ > "$STUB_DIR/pid"
printf '%s\n' "$@" > "$STUB_DIR/args"
for arg in "$@"; do
  case "$arg" in
    actor_rollout_ref.rollout.multi_turn.tool_config_path=*) tool_config=${arg#*=} ;;
  esac
done
url=$(grep -o 'http://127.0.0.1:[0-9]*/run_code' "$tool_config")
curl -sf --max-time 30 "$url" -H 'Content-Type: application/json' \
  -d '{"code": "print(6 * 7)", "language": "python", "run_timeout": 5}' > "$STUB_DIR/answer.json"
sleep 300 &
echo $! > "$STUB_DIR/child"
case "$STUB_MODE" in
  ok) exit 0 ;;
  fail) exit 3 ;;
  hang) touch "$STUB_DIR/training"; wait ;;
esac
"""
# A sandbox that cannot start: it logs why and exits; one that never listens.
BROKEN_SANDBOX = "echo 'loading...'; echo 'OSError: [Errno 98] address already in use' >&2; exit 4\n"
SILENT_SANDBOX = "echo 'still starting'; sleep 300\n"


@pytest.fixture
def setup(tmp_path, scripts):
    stub = tmp_path / "stub.sh"
    stub.write_text(STUB)
    port = scripts.free_port()
    sandbox = f"{sys.executable} -m agentrl.cli --log-level WARNING sandbox"
    env = {
        **os.environ,
        "AGENTRL_TRAIN_CMD": f"bash {stub}",
        "AGENTRL_SANDBOX_CMD": sandbox,
        "SANDBOX_ARGS": "--max-concurrent 2 --uid-base 1860000",
        "SANDBOX_PORT": str(port),
        "SANDBOX_START_TIMEOUT": "60",
        "MODEL_PATH": "/models/qwen",
        "DATA_DIR": str(tmp_path / "data"),
        "RUN_DIR": str(tmp_path / "run"),
        "STUB_DIR": str(tmp_path),
    }
    return {"env": env, "dir": tmp_path, "port": port}


def run_script(setup: dict, mode: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    cmd = ["bash", str(SCRIPT), *args]
    return subprocess.run(cmd, env={**setup["env"], "STUB_MODE": mode, **env},
                          capture_output=True, text=True, timeout=120)


def test_starts_the_sandbox_trains_and_stops_everything(setup, scripts):
    result = run_script(setup, "ok", "trainer.total_training_steps=2")
    assert result.returncode == 0, result.stderr
    answer = json.loads((setup["dir"] / "answer.json").read_text())
    assert (answer["status"], answer["run_result"]["stdout"]) == ("Success", "42\n")
    args = (setup["dir"] / "args").read_text().splitlines()
    run_dir = setup["dir"] / "run"
    assert args[:2] == ["--config", "recipes/retool/gpu_config.yaml"]
    assert "actor_rollout_ref.model.path=/models/qwen" in args
    assert f"data.train_files={setup['dir']}/data/train.parquet" in args
    assert f"data.val_files={setup['dir']}/data/test.parquet" in args
    assert f"trainer.default_local_dir={run_dir}" in args
    tool_config = run_dir / "sandbox_tool.yaml"  # rewritten for the port
    assert f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}" in args
    assert f"127.0.0.1:{setup['port']}/run_code" in tool_config.read_text()
    assert args[-1] == "trainer.total_training_steps=2"  # the user's overrides come last
    assert "stopping the sandbox" in result.stderr
    # the sandbox, the stub and the child it leaked are stopped; the port is free again
    scripts.assert_nothing_left(result.stderr, "sandbox", setup["dir"], setup["port"])


def test_training_failure_is_the_exit_status(setup, scripts):
    result = run_script(setup, "fail")
    assert result.returncode == 3, result.stderr
    assert "training exited with status 3" in result.stderr
    scripts.assert_nothing_left(result.stderr, "sandbox", setup["dir"], setup["port"])


def test_sandbox_that_exits_stops_the_script_with_its_log_tail(setup, scripts):
    broken = setup["dir"] / "broken.sh"
    broken.write_text(BROKEN_SANDBOX)
    result = run_script(setup, "ok", AGENTRL_SANDBOX_CMD=f"bash {broken}")
    assert result.returncode == 1
    assert "the sandbox exited with status 4" in result.stderr
    assert "loading...\nOSError: [Errno 98] address already in use" in result.stderr
    assert not (setup["dir"] / "pid").exists()  # training never started
    scripts.assert_nothing_left(result.stderr, "sandbox", setup["dir"], setup["port"])


def test_sandbox_that_never_answers_is_stopped_after_the_timeout(setup, scripts):
    silent = setup["dir"] / "silent.sh"
    silent.write_text(SILENT_SANDBOX)
    start = time.monotonic()
    result = run_script(setup, "ok", AGENTRL_SANDBOX_CMD=f"bash {silent}", SANDBOX_START_TIMEOUT="2")
    assert result.returncode == 1
    assert time.monotonic() - start < 20
    assert "did not answer" in result.stderr and "within 2 s" in result.stderr
    assert "still starting" in result.stderr
    assert "stopping the sandbox" in result.stderr
    scripts.assert_nothing_left(result.stderr, "sandbox", setup["dir"], setup["port"])


def test_port_already_served_is_refused(setup):
    from fastapi import FastAPI

    app = FastAPI()
    app.get("/health")(lambda: {"status": "ok"})
    with serve_in_thread(app) as url:
        port = url.rsplit(":", 1)[1]
        result = run_script(setup, "ok", SANDBOX_PORT=port)
    assert result.returncode == 1
    assert f"something already answers on http://127.0.0.1:{port}" in result.stderr
    assert not (setup["dir"] / "pid").exists()


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_stops_the_trainer_and_the_sandbox(setup, scripts, sig, status):
    env = {**setup["env"], "STUB_MODE": "hang"}
    returncode, stderr = scripts.interrupt_when_training(
        ["bash", str(SCRIPT)], env, setup["dir"] / "training", sig, start_timeout=60
    )
    assert returncode == status, stderr
    assert "stopping the trainer" in stderr and "stopping the sandbox" in stderr
    scripts.assert_nothing_left(stderr, "sandbox", setup["dir"], setup["port"])
