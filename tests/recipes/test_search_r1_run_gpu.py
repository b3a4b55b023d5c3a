"""Tests for recipes/search_r1/run_gpu.sh without a GPU: the training command is a stub
(AGENTRL_TRAIN_CMD), everything else is real: the retriever is started over a tiny corpus,
waited for, queried by the stub through the tool config the script wrote, and stopped.
After every run, however it ends, no process the script started may be left."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from envs.retriever.sample import sample_corpus, write_corpus

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "recipes" / "search_r1" / "run_gpu.sh"

# The stub trainer: records its pid and arguments, asks the retriever named in the tool
# config it was given, then does what STUB_MODE says.
STUB = r"""#!/usr/bin/env bash
set -euo pipefail
echo $$ > "$STUB_DIR/pid"
printf '%s\n' "$@" > "$STUB_DIR/args"
for arg in "$@"; do
  case "$arg" in
    actor_rollout_ref.rollout.multi_turn.tool_config_path=*) tool_config=${arg#*=} ;;
  esac
done
url=$(grep -o 'http://[^ ]*/retrieve' "$tool_config")
curl -sf -X POST "$url" -H 'Content-Type: application/json' \
  -d '{"queries": ["capital of France"], "topk": 1}' > "$STUB_DIR/answer.json"
case "$STUB_MODE" in
  ok) exit 0 ;;
  fail) exit 3 ;;
  hang) touch "$STUB_DIR/training"; sleep 300 ;;
esac
"""


@pytest.fixture
def setup(tmp_path, scripts):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"")  # the stub never reads them
    (data / "test.parquet").write_bytes(b"")
    corpus = write_corpus(tmp_path / "corpus" / "corpus.jsonl", sample_corpus())
    stub = tmp_path / "stub.sh"
    stub.write_text(STUB)
    port = scripts.free_port()
    env = {
        **os.environ,
        "AGENTRL_TRAIN_CMD": f"bash {stub}",
        "STUB_DIR": str(tmp_path),
        "OUT_DIR": str(tmp_path / "run"),
        "RETRIEVER_PORT": str(port),
        "RETRIEVER_TIMEOUT": "120",
        "STOP_GRACE": "10",
    }
    return {"data": data, "corpus": corpus, "env": env, "dir": tmp_path, "port": port}


def run_script(setup: dict, mode: str, *args: str, corpus: Path | None = None):
    env = {**setup["env"], "STUB_MODE": mode}
    cmd = ["bash", str(SCRIPT), str(setup["data"]), str(corpus or setup["corpus"]), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)


def test_starts_the_retriever_trains_and_stops_it(setup, scripts):
    result = run_script(setup, "ok", "instruct", "trainer.total_training_steps=2")
    assert result.returncode == 0, result.stderr
    answer = json.loads((setup["dir"] / "answer.json").read_text())
    assert answer["result"][0][0]["contents"].startswith('"Paris"')
    args = (setup["dir"] / "args").read_text().splitlines()
    run_dir = setup["dir"] / "run"
    assert args[:2] == ["--config", "recipes/search_r1/gpu_config.yaml"]
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct" in args
    assert f"data.train_files={setup['data']}/train.parquet" in args
    assert f"trainer.default_local_dir={run_dir}" in args
    tool_config = run_dir / "search_tool.yaml"
    assert f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}" in args
    assert args[-1] == "trainer.total_training_steps=2"  # the user's overrides come last
    assert f"127.0.0.1:{setup['port']}/retrieve" in tool_config.read_text()
    assert (setup["dir"] / "corpus" / "index_bm25" / "meta.json").is_file()
    assert not scripts.alive(scripts.pid_in(result.stderr, "retriever"))
    assert not scripts.alive(int((setup["dir"] / "pid").read_text()))


def test_retriever_host_is_where_it_listens_and_what_the_tool_config_names(setup, scripts):
    # on several nodes: an address of this node that the other nodes' ranks reach
    setup["env"]["RETRIEVER_HOST"] = "127.0.0.2"
    result = run_script(setup, "ok")
    assert result.returncode == 0, result.stderr
    tool_config = (setup["dir"] / "run" / "search_tool.yaml").read_text()
    assert f"retrieval_service_url: http://127.0.0.2:{setup['port']}/retrieve" in tool_config
    assert "127.0.0.1" not in tool_config
    # the stub, like a rank's search tool, got its answer at that address
    answer = json.loads((setup["dir"] / "answer.json").read_text())
    assert answer["result"][0][0]["contents"].startswith('"Paris"')
    assert f"waiting up to 120 s for http://127.0.0.2:{setup['port']}/health" in result.stderr
    assert not scripts.alive(scripts.pid_in(result.stderr, "retriever"))


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_wildcard_retriever_host_is_refused(setup, host):
    setup["env"]["RETRIEVER_HOST"] = host
    result = run_script(setup, "ok")
    assert result.returncode == 1
    assert f"RETRIEVER_HOST={host} is not an address the ranks can call" in result.stderr
    assert not (setup["dir"] / "pid").exists()  # nothing started


def test_training_failure_is_the_exit_status_and_stops_the_retriever(setup, scripts):
    result = run_script(setup, "fail", "trainer.total_training_steps=2")
    assert result.returncode == 3
    args = (setup["dir"] / "args").read_text().splitlines()
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B" in args  # base by default
    assert "training exited with status 3" in result.stderr
    assert not scripts.alive(scripts.pid_in(result.stderr, "retriever"))


def test_bad_corpus_stops_with_the_retriever_log_tail(setup, scripts):
    bad = setup["dir"] / "bad.jsonl"
    lines = [json.dumps(doc) for doc in sample_corpus()]
    lines[2] = json.dumps({"id": "2", "content": "typo in the field name"})
    bad.write_text("\n".join(lines) + "\n")
    result = run_script(setup, "ok", corpus=bad)
    assert result.returncode == 1
    assert "the retriever exited before answering /health" in result.stderr
    assert f"{bad}:3: needs a 'contents' string" in result.stderr  # the log tail
    assert not (setup["dir"] / "pid").exists()  # training never started
    assert not scripts.alive(scripts.pid_in(result.stderr, "retriever"))


def test_interrupt_stops_the_trainer_and_the_retriever(setup, scripts):
    env = {**setup["env"], "STUB_MODE": "hang"}
    cmd = ["bash", str(SCRIPT), str(setup["data"]), str(setup["corpus"])]
    # Ctrl-C (SIGINT) once the stub trainer runs
    returncode, stderr = scripts.interrupt_when_training(
        cmd, env, setup["dir"] / "training", start_timeout=120
    )
    assert returncode == 130, stderr
    assert "stopping the trainer" in stderr and "stopping the retriever" in stderr
    assert not scripts.alive(int((setup["dir"] / "pid").read_text()))
    assert not scripts.alive(scripts.pid_in(stderr, "retriever"))
