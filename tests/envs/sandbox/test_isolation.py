"""The start-up probe: what it reports, the interpreter it picks, require_isolation."""

from __future__ import annotations

import os

import pytest

from envs.sandbox.config import SandboxConfig
from envs.sandbox.isolation import IsolationUnavailableError, check_required, probe_isolation
from envs.sandbox.server import create_app


def test_probe_matches_what_the_machine_allows():
    isolation = probe_isolation(SandboxConfig())
    assert os.access(isolation.python, os.X_OK)
    if os.geteuid() == 0:
        assert (isolation.unprivileged_user, isolation.separate_user) == (True, True)
        assert isolation.user_namespace is False
    # Every flag that is off is explained.
    if not all(isolation.as_dict().values()):
        assert isolation.notes


def test_switched_off_namespaces_are_reported_with_the_reason():
    config = SandboxConfig(network_namespace=False, mount_namespace=False)
    isolation = probe_isolation(config)
    assert (isolation.network, isolation.mount_namespace, isolation.private_proc) == (
        False,
        False,
        False,
    )
    assert "network_namespace switched off by the config" in isolation.notes
    assert "mount_namespace switched off by the config" in isolation.notes


def test_unusable_interpreter_is_an_error():
    with pytest.raises(RuntimeError, match="cannot run any Python interpreter: /nonexistent/py"):
        probe_isolation(SandboxConfig(python_executable="/nonexistent/py"))


def test_require_isolation_refuses_to_start_without_it():
    config = SandboxConfig(network_namespace=False, require_isolation=True)
    isolation = probe_isolation(config)
    with pytest.raises(IsolationUnavailableError, match="network is unavailable here"):
        check_required(config, isolation)
    with pytest.raises(IsolationUnavailableError):
        create_app(config, isolation)
    check_required(SandboxConfig(network_namespace=False), isolation)  # not required: fine
