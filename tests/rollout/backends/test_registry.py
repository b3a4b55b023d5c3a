"""Backends are plugins: looked up by name or dotted path, and never named outside
agentrl/rollout/backends/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import agentrl
from agentrl.rollout.backends.registry import (
    BACKEND_PLUGINS,
    BUILTIN,
    BackendPlugin,
    backend_plugin,
    backend_problems,
    weight_sync_of,
)
from agentrl.utils.registry import UnknownNameError

PACKAGE = Path(agentrl.__file__).parent
BACKENDS_DIR = PACKAGE / "rollout" / "backends"
NAMES = "|".join(BUILTIN)
# a backend compared by name, its class tested or named, or its module imported.
BACKEND_REFERENCE = re.compile(
    rf"""(==|!=|\bin)\s*\(?\s*["']({NAMES})["']"""
    rf"""|["']({NAMES})["']\s*(==|!=)"""
    rf"""|backends\.({NAMES})\b"""
    r"""|\b(HFBackend|SGLangBackend|VLLMBackend|HFPlugin|SGLangPlugin|VLLMPlugin"""
    r"""|ScriptedBackend|ScriptedPlugin)\b"""
    r"""|\.kind\s*==\s*["'](hf|sglang|vllm|scripted|other)["']"""
)


def backend_references(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if BACKENDS_DIR in path.parents or path == PACKAGE / "compat.py":  # compat: old names
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if BACKEND_REFERENCE.search(line):
                found.append(f"{path.relative_to(root.parent)}:{number}: {line.strip()}")
    return found


def test_no_module_outside_the_backends_names_a_backend():
    assert backend_references(PACKAGE) == []


def test_the_scan_finds_each_kind_of_reference(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(
        'if cfg.name == "sglang":\n    pass\n'
        "from agentrl.rollout.backends.hf import x\n"
        "isinstance(b, SGLangBackend)\n"
        "from agentrl.rollout.backends.scripted import ScriptedBackend\n"
        'ok = backend_plugin(cfg.name)\n'
        'if self.kind == "hf":\n    pass\n'
    )
    assert [line.split(":")[1] for line in backend_references(package)] == ["1", "3", "4", "5", "7"]


def test_builtin_plugins_by_name():
    assert {name: type(backend_plugin(name)).__name__ for name in BUILTIN} == {
        "hf": "HFPlugin", "sglang": "SGLangPlugin", "vllm": "VLLMPlugin",
        "scripted": "ScriptedPlugin"}
    assert backend_plugin("sglang").launches_servers
    assert backend_plugin("vllm").launches_servers
    assert not backend_plugin("hf").launches_servers
    assert not backend_plugin("scripted").launches_servers


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(UnknownNameError, match="rollout.name is 'sglag'; choose one of hf, "
                                               "scripted, sglang, vllm or the dotted path"):
        backend_plugin("sglag")
    assert backend_problems({"name": "sglag"})[0].startswith(
        "actor_rollout_ref.rollout.name is 'sglag'")


class EchoBackend:
    weight_sync = "state_dict"


class EchoPlugin(BackendPlugin):
    name = "echo"

    def config_problems(self, rollout):
        return [] if rollout.get("engine_kwargs") else ["echo needs engine_kwargs"]

    def create(self, rollout, model_path, tokenizer, **kwargs):
        return EchoBackend()


def test_a_users_plugin_by_dotted_path_and_by_registration():
    path = f"{__name__}.EchoPlugin"
    assert isinstance(backend_plugin(path), EchoPlugin)
    assert backend_problems({"name": path, "engine_kwargs": {}}) == ["echo needs engine_kwargs"]
    BACKEND_PLUGINS.register("echo")(EchoPlugin)
    try:
        from agentrl.rollout.backends.factory import create_backend

        assert isinstance(create_backend({"name": "echo"}, None, None), EchoBackend)
    finally:
        BACKEND_PLUGINS.unregister("echo")


def test_a_dotted_path_that_is_not_a_plugin_is_named():
    with pytest.raises(ValueError, match="rollout.name='pathlib.Path'.*not a subclass of "
                                         "agentrl.rollout.backends.registry.BackendPlugin"):
        backend_plugin("pathlib.Path")


def test_weight_sync_of_a_backend():
    assert weight_sync_of(EchoBackend()) == "state_dict"
    assert weight_sync_of(object()) == "state_dict"
    bad = type("Bad", (), {"weight_sync": "carrier-pigeon"})()
    with pytest.raises(ValueError, match="Bad.weight_sync is 'carrier-pigeon'"):
        weight_sync_of(bad)
