"""Tests for envs/retriever/cli.py: `agentrl retriever` serves a corpus end to end."""

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from envs.retriever import cli
from envs.retriever.sample import sample_corpus, write_corpus

REPO = Path(__file__).resolve().parents[3]


def parse(*argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_arguments_defaults():
    args = parse("--index-dir", "d")
    assert (args.host, args.port, args.topk, args.kind, args.corpus) == (
        "127.0.0.1",
        8000,
        3,
        "bm25",
        None,
    )


def test_limit_defaults():
    args = parse("--index-dir", "d")
    limits = (args.max_queries, args.max_query_chars, args.search_workers)
    assert limits == (1024, 4096, None)
    assert (args.max_body_bytes, args.body_timeout) == (8 * 1024 * 1024, 30.0)


def test_run_errors_without_serving(tmp_path):
    assert cli.run(parse("--index-dir", str(tmp_path / "none"))) == 1
    assert cli.run(parse("--index-dir", str(tmp_path), "--topk", "0")) == 2


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--max-queries", "0", "--max-queries must be >= 1, got 0"),
        ("--max-query-chars", "0", "--max-query-chars must be >= 1, got 0"),
        ("--max-body-bytes", "0", "--max-body-bytes must be >= 1, got 0"),
        ("--search-workers", "0", "--search-workers must be >= 1, got 0"),
        ("--body-timeout", "0", "--body-timeout must be > 0 seconds, got 0"),
    ],
)
def test_bad_limits_are_refused_before_loading(tmp_path, caplog, option, value, message):
    # The index dir does not exist: a refused option must return 2 before looking at it.
    assert cli.run(parse("--index-dir", str(tmp_path / "none"), option, value)) == 2
    assert message in caplog.text


def test_agentrl_retriever_command_serves_queries(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", sample_corpus())
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "agentrl.cli",
        "retriever",
        "--corpus",
        str(corpus),
        "--index-dir",
        str(tmp_path / "idx"),
        "--port",
        str(port),
        "--topk",
        "1",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "retriever did not start"
            time.sleep(0.1)
        result = httpx.post(url + "/retrieve", json={"queries": ["highest mountain"]}, timeout=10)
        assert [d["id"] for d in result.json()["result"][0]] == ["3"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert (tmp_path / "idx" / "meta.json").is_file()
