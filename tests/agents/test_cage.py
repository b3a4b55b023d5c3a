"""The Sandbox interface: a user's Sandbox class, named by its dotted path, runs a whole
episode (its own storage: the workspace goes in and comes back out through copy_in and
copy_out, the check sees what the CLI wrote); the built-in kinds load by name; a value
that is neither, a class that is no Sandbox and a module that does not exist are named."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest

from agentrl.agents.cage import Sandbox, SandboxSpec, sandbox_class
from agentrl.agents.container import ContainerSandbox
from agentrl.agents.harness import AgentOptions, Harness
from agentrl.agents.sandbox import BwrapSandbox, UncagedSandbox
from tests.agents.conftest import run_harness_episode

USER_BOX = '''
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from agentrl.agents.cage import Sandbox
from agentrl.agents.sandbox import run_caged

CALLS = []


class RemoteLikeBox(Sandbox):
    """Keeps the workspace in storage of its own, as a remote service would."""

    isolated = False

    def __init__(self, spec):
        super().__init__(spec)
        self.store = Path(tempfile.mkdtemp(prefix="agentrl-box-"))

    def host_path(self, inside):
        return self.store / Path(inside).name

    async def start(self):
        CALLS.append(("start", self.spec.name))

    async def copy_in(self, source, inside):
        CALLS.append(("copy_in", Path(source).name))
        shutil.copytree(source, self.host_path(inside))

    async def run(self, command, env, timeout_s, stop=None):
        CALLS.append(("run", Path(command[0]).name))
        spec = replace(self.spec, workdir=self.host_path(self.spec.workdir))
        return await run_caged(list(command), env, spec, timeout_s, stop)

    async def copy_out(self, inside, target):
        CALLS.append(("copy_out", Path(target).name))
        shutil.rmtree(target)
        shutil.copytree(self.host_path(inside), target)

    async def close(self):
        CALLS.append(("close",))
        shutil.rmtree(self.store)
'''


def _harness(tmp_path: Path, script: str) -> Harness:
    cli = tmp_path / "fake-cli"
    cli.write_text("#!/bin/sh\n" + script)
    cli.chmod(0o755)
    return Harness(name="fake", binary_env="AGENTRL_FAKE_BIN", binary_name="fake-cli",
                   args_env="AGENTRL_FAKE_ARGS",
                   command=lambda binary, prompt, home, extra: [binary, prompt],
                   environment=lambda home: {}, prepare_home=lambda home: None,
                   final_text=lambda out: out)


def test_a_users_sandbox_class_runs_the_episode_through_the_interface(tmp_path, monkeypatch):
    (tmp_path / "my_boxes.py").write_text(textwrap.dedent(USER_BOX))
    monkeypatch.syspath_prepend(str(tmp_path))
    harness = _harness(tmp_path, 'echo "$1" > prompt.txt\n')
    options = AgentOptions.from_env(harness, binary=str(tmp_path / "fake-cli"),
                                    sandbox="my_boxes.RemoteLikeBox",
                                    root=str(tmp_path / "ep"))
    task = {"raw_prompt": [{"role": "user", "content": "do it"}],
            "extra_info": {"files": {"in.txt": "x"}, "check": "grep -qx 'do it' prompt.txt"}}
    result = run_harness_episode(harness, task, options)
    assert (result["cli_exit"], result["check_exit"], result["score"]) == (0, 0, 1.0)
    calls = sys.modules["my_boxes"].CALLS
    episode = calls[0][1]
    assert calls[2][0] == "run" and calls[2][1].startswith("python")  # the bridge
    assert calls[:2] + calls[3:] == [
        ("start", episode), ("copy_in", "workspace"), ("copy_out", "workspace"), ("close",),
        ("start", f"{episode}-check"), ("copy_in", "check"), ("run", "bash"),
        ("copy_out", "check"), ("close",)]
    assert list((tmp_path / "ep").iterdir()) == []


def test_built_in_kinds_load_by_name_and_bad_values_are_named(tmp_path):
    assert sandbox_class("bwrap") is BwrapSandbox
    assert sandbox_class("none") is UncagedSandbox
    assert sandbox_class("container") is ContainerSandbox
    assert (BwrapSandbox.isolated, UncagedSandbox.isolated, ContainerSandbox.isolated) == (
        True, False, True)
    with pytest.raises(ValueError, match=r"one of \('bwrap', 'none', 'container'\) or the "
                                         r"dotted path .* got 'docker'"):
        sandbox_class("docker")
    with pytest.raises(ValueError, match="is not a subclass of agentrl.agents.cage.Sandbox"):
        sandbox_class("agentrl.agents.harness.Harness")
    with pytest.raises(ValueError, match="no_such_module"):
        sandbox_class("no_such_module.Box")
    harness = _harness(tmp_path, "")
    with pytest.raises(ValueError, match="got 'docker'"):
        AgentOptions.from_env(harness, sandbox="docker")


def test_the_default_copies_follow_the_writable_folders(tmp_path):
    """Bind mounts (bwrap, container): the inside path shows the host path, so a copy to
    the same folder is nothing; elsewhere the target is replaced by the source."""

    class Bound(Sandbox):
        async def run(self, command, env, timeout_s, stop=None):
            raise NotImplementedError

    host, other = tmp_path / "host", tmp_path / "other"
    host.mkdir()
    (host / "a.txt").write_text("a")
    other.mkdir()
    (other / "stale.txt").write_text("old")
    box = Bound(SandboxSpec(kind="x", workdir=Path("/inside"),
                            writable=((host, Path("/inside")),)))
    assert box.host_path(Path("/inside/sub/f")) == host / "sub" / "f"
    asyncio.run(box.copy_in(host, Path("/inside")))
    assert [p.name for p in host.iterdir()] == ["a.txt"]
    asyncio.run(box.copy_out(Path("/inside"), other))
    assert sorted(p.name for p in other.iterdir()) == ["a.txt"]
    with pytest.raises(ValueError, match="/elsewhere is in none of the sandbox's writable"):
        box.host_path(Path("/elsewhere"))
