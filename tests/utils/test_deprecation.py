"""Moved modules keep working at their old import paths, with a DeprecationWarning."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from agentrl.utils.deprecation import moved_module

MOVED = [
    ("agentrl.algos.registry", "agentrl.utils.registry", "Registry"),
    ("agentrl.rollout.chat", "agentrl.models.chat", "ChatRenderer"),
    ("agentrl.rollout.testing", "agentrl.testing.rollout", "ScriptedBackend"),
    ("agentrl.workers.testing", "agentrl.testing.workers", "worker_config"),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED)
def test_old_path_warns_and_gives_the_new_module(old, new, name):
    # A fresh interpreter: the old path must not be imported yet for the warning to fire.
    code = textwrap.dedent(f"""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from {old} import {name} as from_old
        import {new} as new_module
        import sys
        assert from_old is getattr(new_module, {name!r})
        assert sys.modules[{old!r}] is new_module
        messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
        assert any("{old} moved to {new}" in m for m in messages), messages
        # the warning points at the importing line, not at the import machinery
        assert any(w.filename == "<string>" for w in caught), [w.filename for w in caught]
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_moved_module_replaces_the_module_being_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "agentrl_test_old_name", raising=False)
    with pytest.warns(DeprecationWarning, match="agentrl_test_old_name moved to json"):
        moved_module("agentrl_test_old_name", "json")
    import json

    assert sys.modules["agentrl_test_old_name"] is json
    monkeypatch.delitem(sys.modules, "agentrl_test_old_name")
