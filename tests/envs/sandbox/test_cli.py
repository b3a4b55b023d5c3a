"""`agentrl sandbox` options map one to one onto SandboxConfig."""

from __future__ import annotations

import argparse

import pytest

from envs.sandbox.cli import add_arguments, sandbox_config_from_args


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_match_the_config():
    args = _parse()
    assert (args.host, args.port) == ("127.0.0.1", 8080)
    config = sandbox_config_from_args(args)
    assert (config.max_processes, config.network_namespace) == (64, True)


def test_limits_and_switches():
    args = _parse(
        "--port", "9000", "--max-processes", "8", "--default-run-timeout", "2.5",
        "--no-network-namespace", "--require-isolation", "--python-executable", "/usr/bin/python3",
    )  # fmt: skip
    config = sandbox_config_from_args(args)
    assert args.port == 9000
    assert (config.max_processes, config.default_run_timeout) == (8, 2.5)
    assert (config.network_namespace, config.require_isolation) == (False, True)
    assert config.python_executable == "/usr/bin/python3"


def test_invalid_value_is_an_error_naming_the_field():
    with pytest.raises(ValueError, match=r"SandboxConfig\.max_concurrent must be > 0"):
        sandbox_config_from_args(_parse("--max-concurrent", "0"))
