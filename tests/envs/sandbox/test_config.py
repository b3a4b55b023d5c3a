"""SandboxConfig validation and the limits /health shows."""

from __future__ import annotations

import pytest

from envs.sandbox.config import SandboxConfig


def test_defaults_are_valid():
    config = SandboxConfig().validate()
    assert (config.max_concurrent, config.default_run_timeout, config.memory_limit_mb) == (
        4,
        10.0,
        1024,
    )


@pytest.mark.parametrize("name", ["max_processes", "max_output_bytes", "memory_limit_mb"])
def test_non_positive_limits_name_the_field(name):
    with pytest.raises(ValueError, match=rf"SandboxConfig\.{name} must be > 0, got 0"):
        SandboxConfig(**{name: 0}).validate()


def test_default_timeout_over_the_maximum():
    with pytest.raises(ValueError, match=r"default_run_timeout \(20\.0\) exceeds max_run_timeout"):
        SandboxConfig(default_run_timeout=20.0, max_run_timeout=10.0).validate()


def test_limits_are_the_numeric_fields():
    limits = SandboxConfig(max_processes=7).limits()
    assert limits["max_processes"] == 7
    assert "python_executable" not in limits and "network_namespace" not in limits
    assert len(limits) == 16
