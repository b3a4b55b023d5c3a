"""`agentrl doctor`: each optional part found (with its version) or missing (with how to
install it), exit 0 either way; the episode cgroups line says why they are missing."""

from __future__ import annotations

from agentrl.agents import limits
from agentrl.agents.container import podman_host
from agentrl.cli import main
from agentrl.doctor import collect


def test_found_and_missing_parts_are_listed_and_it_exits_0(tmp_path, monkeypatch, capsys):
    claude = tmp_path / "claude"
    claude.write_text("#!/bin/sh\necho '2.1.197 (Claude Code)'\n")
    claude.chmod(0o755)
    monkeypatch.setenv("AGENTRL_CLAUDE_BIN", str(claude))
    monkeypatch.setenv("AGENTRL_CODEX_BIN", "")
    monkeypatch.setenv("PATH", str(tmp_path))          # no node, no codex, no bwrap on PATH
    monkeypatch.setenv("AGENTRL_BWRAP", str(tmp_path / "none"))
    monkeypatch.setenv("AGENTRL_VLLM_VENV", str(tmp_path / "no-venv"))
    monkeypatch.setenv("AGENTRL_PODMAN", str(tmp_path / "no-podman"))
    monkeypatch.setattr(limits, "_parents", lambda: "no memory and pids cgroup controllers "
                        "are mounted")
    parts = {p.name: p for p in collect()}
    assert list(parts) == ["node", "claude", "codex", "bubblewrap", "episode cgroups",
                           "podman", "vllm environment", "chromium", "reasoning-gym", "textarena",
                           "openenv-core", "verifiers"]
    assert not parts["episode cgroups"].found
    assert parts["episode cgroups"].detail == "no memory and pids cgroup controllers are mounted"
    assert parts["claude"].found and parts["claude"].detail.startswith("2.1.197 (Claude Code)")
    assert not parts["codex"].found and "setup_agent_clis.sh" in parts["codex"].install
    assert not parts["node"].found and not parts["bubblewrap"].found
    assert "apt-get install bubblewrap" in parts["bubblewrap"].install
    assert not parts["podman"].found and "apt-get install podman" in parts["podman"].install
    assert not parts["vllm environment"].found
    assert "setup_vllm_env.sh" in parts["vllm environment"].install
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "claude" in out and "found" in out and "2.1.197" in out
    assert "codex" in out and "missing" in out and "install: bash scripts/setup_agent_clis.sh" in out
    assert out.count("install:") == sum(not p.found for p in parts.values())


def test_rootless_podman_names_the_episode_limits_its_containers_cannot_get(tmp_path,
                                                                           monkeypatch):
    podman = tmp_path / "podman"
    info = ('{"host": {"security": {"rootless": true}, "cgroupVersion": "%s", '
            '"cgroupControllers": %s}}')
    monkeypatch.setenv("AGENTRL_PODMAN", str(podman))
    details = []
    for version, controllers in (("v1", "[]"), ("v2", '["memory", "pids"]')):
        podman.write_text(f"#!/bin/sh\necho '{info % (version, controllers)}'\n")
        podman.chmod(0o755)
        podman_host.cache_clear()
        [part] = [p for p in collect() if p.name == "podman"]
        details.append(part.detail)
    podman_host.cache_clear()
    assert details == [
        "rootless, cgroup v1: episode limits memory, pids, cpu not enforced in containers: "
        "episode_memory_mb holds per process only (--ulimit data); episode_pids holds as the "
        "container's RLIMIT_NPROC (--ulimit nproc); episode_cpus does not hold",
        "rootless, cgroup v2: episode limits memory, pids held; cpu not enforced in "
        "containers: episode_cpus does not hold"]


def test_every_environment_kind_env_prepare_accepts_has_its_package_listed():
    from agentrl.doctor import ENV_PACKAGES
    from agentrl.environments.spec import SPEC_FORMS

    assert set(ENV_PACKAGES.values()) == set(SPEC_FORMS)
