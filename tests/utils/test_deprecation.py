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
    ("agentrl.trainer.async_trainer", "agentrl.trainer.off_policy", "OffPolicyTrainer"),
    ("agentrl.trainer.async_rollout", "agentrl.trainer.producer", "RolloutProducer"),
    ("agentrl.data.arithmetic", "agentrl.tasks.arithmetic", "make_arithmetic_rows"),
    ("agentrl.data.search_facts", "agentrl.tasks.search_facts", "POOLS"),
    ("agentrl.quickstart.tasks", "agentrl.tasks.quickstart", "TASKS"),
    ("agentrl.quickstart.search_task", "agentrl.tasks.search_task", "serve_search_tool"),
    ("agentrl.quickstart.retool_task", "agentrl.tasks.retool_task", "serve_sandbox_tool"),
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


def test_renamed_classes_keep_their_old_names_with_a_warning():
    import agentrl.rollout.sharded as sharded
    import agentrl.trainer.off_policy as off_policy

    with pytest.warns(DeprecationWarning, match="AsyncPPOTrainer is deprecated: it is "
                      "agentrl.trainer.off_policy.OffPolicyTrainer now"):  # fmt: skip
        assert off_policy.AsyncPPOTrainer is off_policy.OffPolicyTrainer
    with pytest.warns(DeprecationWarning, match="EngineWorker"):
        assert sharded.AgentWorker is sharded.EngineWorker
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        sharded.Nope  # noqa: B018


@pytest.mark.parametrize(("override", "old_key", "new_key", "value"), [
    ("async.max_staleness=0", "async", "off_policy.max_staleness", 0),
    ("actor_rollout_ref.rollout.agent_workers=1", "actor_rollout_ref.rollout.agent_workers",
     "actor_rollout_ref.rollout.engine_workers", 1),
])
def test_former_config_keys_are_read_with_a_warning(override, old_key, new_key, value):
    from omegaconf import OmegaConf

    from agentrl.config import load_config

    with pytest.warns(DeprecationWarning, match=f"config key {old_key} is deprecated"):
        cfg = load_config(overrides=["trainer.mode=async", override])
    assert OmegaConf.select(cfg, new_key) == value
