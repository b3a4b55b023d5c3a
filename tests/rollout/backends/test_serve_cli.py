"""Tests for agentrl/rollout/backends/serve_cli.py: `agentrl serve` arguments and errors.

The command serving real requests is tested in test_launcher.py (the launcher starts it)."""

from __future__ import annotations

import argparse

from agentrl.rollout.backends import serve_cli


def parse(*argv):
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_and_sglang_style_aliases():
    args = parse("--model", "/m")
    assert (args.model, args.host, args.port, args.max_num_seqs, args.seed) == (
        "/m",
        "127.0.0.1",
        30000,
        64,
        0,
    )
    assert (args.tokenizer, args.device, args.dtype, args.batch_wait_ms) == (None, None, None, 0)
    assert args.kv_cache == "chunked"
    assert parse("--model", "/m", "--kv-cache", "dynamic").kv_cache == "dynamic"
    sglang_style = parse(
        "--model-path",
        "/m",
        "--max-running-requests",
        "8",
        "--random-seed",
        "3",
        "--tokenizer-path",
        "/t",
    )
    assert (sglang_style.model, sglang_style.max_num_seqs, sglang_style.seed) == ("/m", 8, 3)
    assert sglang_style.tokenizer == "/t"


def test_errors_return_nonzero_without_serving(tmp_path, tiny_model_dir, caplog):
    assert serve_cli.run(parse("--model", str(tmp_path / "missing"))) == 1
    assert f"cannot load {tmp_path / 'missing'}: no such file or directory" in caplog.text
    assert serve_cli.run(parse("--model", str(tiny_model_dir), "--tokenizer", "./nowhere")) == 1
    assert "cannot load ./nowhere" in caplog.text
    assert serve_cli.run(parse("--model", str(tiny_model_dir), "--max-num-seqs", "0")) == 2
    assert "--max-num-seqs must be >= 1" in caplog.text
