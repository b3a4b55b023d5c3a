"""sandbox=container with podman, on an image built here from scratch (``podman import`` of
a tarball of a few host programs and the libraries they and the bridge's Python load; no
registry): the container shows its image and the binds only (no home, no other episode,
no project checkout), takes writes only in its folder, has no network; a fork bomb and a
memory hog end their own runs while one beside them finishes; a daemonized tree dies at
the budget with its container; a whole episode runs through the bridge and is scored by
its check in a second container. Skipped, saying why, where podman is absent or cannot run
a container here. The flags themselves are checked without podman."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import types
from pathlib import Path

import httpx
import pytest

from agentrl.agents import container as container_module
from agentrl.agents.cage import SandboxSpec, same_place
from agentrl.agents.container import ContainerSandbox, container_argv, find_podman
from agentrl.agents.harness import AgentOptions, Harness, run_episode
from agentrl.agents.limits import EpisodeLimits, cgroup_support

PROGRAMS = ("sh", "bash", "cat", "ls", "echo", "touch", "head", "sleep", "setsid", "grep")
MARK = "318.25"  # a sleep length no other process uses
PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
NO_LIMITS = EpisodeLimits(None, None, None, None)


def _libraries(path: str) -> set[str]:
    out = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30).stdout
    return set(re.findall(r"(/\S+) \(0x", out))


def _root_files() -> list[str]:
    """The programs, the libraries they (and the bridge's Python with its C modules) load."""
    files = {os.path.realpath(shutil.which(p)) for p in PROGRAMS if shutil.which(p)}
    files |= {shutil.which(p) for p in PROGRAMS if shutil.which(p)}
    loaded = [*files, str(PYTHON.resolve()),
              *map(str, Path(sys.base_prefix).glob("lib/python3*/lib-dynload/*.so"))]
    for path in loaded:
        files |= _libraries(path)
    files |= set(map(str, Path("/usr/lib").glob("*/libgcc_s.so.1")))  # glibc loads it for threads
    return sorted(files)


def _tarball(files: list[str]) -> bytes:
    """A root of ``files`` at their real folders, symlinks kept, merged-usr links made."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for top in ("bin", "sbin", "lib", "lib64"):
            if os.path.islink(f"/{top}"):
                link = tarfile.TarInfo(top)
                link.type, link.linkname = tarfile.SYMTYPE, os.readlink(f"/{top}")
                tar.addfile(link)
        for top in ("etc", "tmp"):
            folder = tarfile.TarInfo(top)
            folder.type, folder.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(folder)
        added: set[str] = set()
        for path in files:
            while path not in added:
                name = os.path.join(os.path.realpath(os.path.dirname(path)),
                                    os.path.basename(path))
                added.add(path)
                tar.add(name, arcname=name.lstrip("/"), recursive=False)
                if not os.path.islink(name):
                    break
                path = os.path.join(os.path.dirname(name), os.readlink(name))
    return buffer.getvalue()


def _try(prefix: list[str], image: str) -> str | None:
    run = subprocess.run([*prefix, "run", "--rm", "--pull=never", "--ulimit=nofile=1024:1024",
                          "--ulimit=nproc=1024:1024", image, "/bin/sh", "-c", "echo ok"],
                         capture_output=True, text=True, timeout=120)
    return None if run.stdout.strip() == "ok" else (run.stderr.strip().splitlines() or ["?"])[-1]


@pytest.fixture(scope="module")
def image() -> str:
    """A local image built from the host's files (kept in podman's store, rebuilt when they
    change); AGENTRL_PODMAN_RUNTIME set to runc where podman's default runtime cannot run
    here (crun on a hybrid cgroup v1/v2 machine)."""
    podman = find_podman()
    if podman is None:
        pytest.skip("podman is not installed (apt-get install podman, or AGENTRL_PODMAN)")
    files = _root_files()
    digest = hashlib.sha256("\n".join(f"{f}:{os.stat(f).st_size}" for f in files).encode())
    name = f"localhost/agentrl-test-root:{digest.hexdigest()[:12]}"
    if subprocess.run([podman, "image", "exists", name], timeout=60).returncode != 0:
        built = subprocess.run([podman, "import", "-", name], input=_tarball(files),
                               capture_output=True, timeout=300)
        if built.returncode != 0:
            pytest.skip(f"podman cannot import an image here: {built.stderr.decode()[-300:]}")
    with pytest.MonkeyPatch.context() as patch:
        why = _try([podman], name)
        if why is not None and os.environ.get(container_module.RUNTIME_ENV) is None \
                and shutil.which("runc") and _try([podman, "--runtime", "runc"], name) is None:
            patch.setenv(container_module.RUNTIME_ENV, "runc")
            why = None
        if why is not None:
            pytest.skip(f"podman cannot run a container here: {why}")
        yield name


def _spec(folder: Path, image: str, limits: EpisodeLimits = NO_LIMITS, **kw) -> SandboxSpec:
    (folder / "work").mkdir(parents=True, exist_ok=True)
    return SandboxSpec(kind="container", workdir=folder / "work", writable=same_place(folder),
                       image=image, limits=limits,
                       name=f"agentrl-test-{folder.parent.name}-{folder.name}",  # unique per test
                       watched=(folder,), **kw)


async def _run(spec: SandboxSpec, script: str, timeout: float = 60):
    box = ContainerSandbox(spec)
    try:
        await box.start()
        started = time.monotonic()
        result = await box.run(["/bin/bash", "-c", script], {"PATH": "/usr/bin:/bin"},
                               timeout)
        return result, time.monotonic() - started
    finally:
        await box.close()


def _containers(prefix: str) -> list[str]:
    out = subprocess.run([find_podman(), "ps", "--all", "--format", "{{.Names}}"],
                         capture_output=True, text=True, timeout=60).stdout
    return [n for n in out.split() if n.startswith(prefix)]


def test_the_flags_without_podman(tmp_path, monkeypatch):
    spec = SandboxSpec(kind="container", workdir=tmp_path, writable=same_place(tmp_path),
                       visible=(str(tmp_path),), image="img:1", cpu_s=70, file_size_mb=2,
                       limits=EpisodeLimits(memory_mb=512, pids=100, cpus=1.5))
    argv = container_argv(spec, ["podman"], "ep", tmp_path / "pid", ["true"], {"A": "b c"})
    for flag in ("--network=none", "--read-only", "--cap-drop=all", "--pull=never",
                 "--security-opt=no-new-privileges", "--memory=512m", "--memory-swap=512m",
                 "--pids-limit=100", "--cpus=1.5", "--ulimit=cpu=70:70",
                 "--ulimit=fsize=2097152:2097152", "--ulimit=nproc=100:100"):
        assert flag in argv, flag
    assert argv[-2:] == ["img:1", "true"]
    assert f"{tmp_path}:{tmp_path}:ro" in argv and "A=b c" in argv
    assert "--pids-limit=-1" in container_argv(
        SandboxSpec(kind="container", workdir=tmp_path, image="i"), ["podman"], "ep",
        tmp_path / "pid", ["true"], {})
    with pytest.raises(ValueError, match="needs an image: AGENTRL_AGENT_IMAGE"):
        ContainerSandbox(SandboxSpec(kind="container", workdir=tmp_path))
    monkeypatch.setenv(container_module.PODMAN_ENV, str(tmp_path / "no-podman"))
    with pytest.raises(FileNotFoundError, match="apt-get install podman"):
        ContainerSandbox(SandboxSpec(kind="container", workdir=tmp_path, image="i"))


def test_the_container_shows_its_image_and_its_folder_only(tmp_path, image):
    fd, secret = tempfile.mkstemp(prefix=".agentrl-secret-", dir=Path.home())
    os.write(fd, b"SECRET\n")
    os.close(fd)
    other = tmp_path.parent / f"{tmp_path.name}-other-episode"
    other.mkdir()
    (other / "answer").write_text("SECRET\n")
    checkout = Path(__file__).resolve().parents[2] / "pyproject.toml"
    reads = "; ".join(f"cat {t} 2>/dev/null || echo hidden"
                      for t in (secret, other / "answer", checkout))
    reads += f"; echo home: $(ls -A {Path.home()} 2>/dev/null) :home"
    net = (f"{PYTHON} -c \"import socket; socket.create_connection(('1.1.1.1', 80), 2)\" "
           "2>/dev/null || echo no-network")
    spec = _spec(tmp_path, image, visible=(sys.base_prefix,))
    try:
        result, _ = asyncio.run(_run(spec, f"{reads}; echo in > inside.txt; touch /etc/x "
                                           f"2>/dev/null || echo ro; {net}; ls /"))
    finally:
        os.unlink(secret)
    assert result.returncode == 0, result.stderr
    assert "SECRET" not in result.stdout
    lines = result.stdout.split()
    assert lines[:3] == ["hidden"] * 3
    home = lines[lines.index("home:") + 1:lines.index(":home")]
    bound = Path(sys.base_prefix).resolve()  # the bridge's Python, bound at its path
    assert set(home) <= ({bound.relative_to(Path.home()).parts[0]}
                         if bound.is_relative_to(Path.home()) else set()), home
    lines = lines[lines.index(":home") + 1:]
    assert lines[:2] == ["ro", "no-network"]
    assert set(lines[2:]) <= {"bin", "dev", "etc", "lib", "lib64", "proc", "root", "run",
                              "sbin", "sys", "tmp", "usr", "var"}, lines[2:]
    assert (tmp_path / "work" / "inside.txt").read_text() == "in\n"
    assert _containers(spec.name) == []


def test_a_fork_bomb_and_a_memory_hog_end_their_runs_not_the_others(tmp_path, image):
    if cgroup_support() is not None:  # the container's cgroup is watched as the run's own
        pytest.skip(f"no cgroups here: {cgroup_support()}")
    limits = EpisodeLimits(memory_mb=128, pids=64, disk_mb=None)
    bomb = "b() { b | b & }; b; sleep 60"
    hog = f"{PYTHON} -c 'x = bytearray(1 << 30); print(len(x))'; sleep 60"
    calm = "sleep 2; echo calm > out.txt; cat out.txt"

    async def main():
        return await asyncio.gather(*(
            _run(_spec(tmp_path / name, image, limits, visible=(sys.base_prefix,)), script)
            for name, script in (("bomb", bomb), ("hog", hog), ("calm", calm))))

    (bombed, bomb_s), (hogged, hog_s), (calm_run, _) = asyncio.run(main())
    assert (bombed.stopped, bombed.limit, bombed.returncode) == ("limit", "pids", None)
    assert (hogged.stopped, hogged.limit) == ("limit", "memory")
    assert bomb_s < 20 and hog_s < 20  # not the 60 s budget, nor the sleeps
    assert (calm_run.stopped, calm_run.returncode, calm_run.stdout) == ("exit", 0, "calm\n")
    assert [c for c in _containers(f"agentrl-test-{tmp_path.name}-")] == []  # this test's


def test_a_daemonized_tree_dies_with_its_container_at_the_budget(tmp_path, image):
    spec = _spec(tmp_path, image)
    result, took = asyncio.run(_run(spec, f"setsid sleep {MARK} & sleep {MARK} & "
                                          "echo started; wait", timeout=3))
    assert (result.stopped, result.returncode, result.stdout) == ("timeout", None,
                                                                  "started\n")
    assert took < 15
    assert _containers(spec.name) == []
    assert not any(MARK.encode() in Path(f"/proc/{p}/cmdline").read_bytes()
                   for p in filter(str.isdigit, os.listdir("/proc"))
                   if os.path.exists(f"/proc/{p}/cmdline"))


def test_a_missing_image_is_named(tmp_path, image):
    spec = _spec(tmp_path, "localhost/agentrl-no-such-image:0")
    with pytest.raises(FileNotFoundError, match="agentrl-no-such-image:0' is not in podman's"):
        asyncio.run(_run(spec, "true"))


def test_an_episode_runs_and_is_checked_in_containers(tmp_path, image):
    cli = tmp_path / "fake-cli"
    cli.write_text('#!/bin/sh\necho "$1" > prompt.txt; echo "$FAKE_URL" > url.txt\n'
                   'cat test_hidden.txt > seen.txt 2>/dev/null || echo no-test > seen.txt\n')
    cli.chmod(0o755)
    harness = Harness(name="fake", binary_env="AGENTRL_FAKE_BIN", binary_name="fake-cli",
                      args_env="AGENTRL_FAKE_ARGS",
                      command=lambda binary, prompt, home, extra: [binary, prompt],
                      environment=lambda home: {"FAKE_URL": "http://127.0.0.1:{port}"},
                      prepare_home=lambda home: None, final_text=lambda out: out)
    options = AgentOptions(binary=str(cli), sandbox="container", image=image,
                           root=str(tmp_path / "ep"), keep=True)
    task = {"raw_prompt": [{"role": "user", "content": "do it"}],
            "extra_info": {"check_files": {"test_hidden.txt": "real\n"},
                           "check": "grep -qx 'do it' prompt.txt && grep -q "
                                    "'127.0.0.1:[0-9]' url.txt && grep -qx real "
                                    "test_hidden.txt"}}

    async def main():
        async with httpx.AsyncClient() as http:
            client = types.SimpleNamespace(_client=http, base_url="http://g/sessions/s/v1")
            return await run_episode(harness, task, client, options)

    result = asyncio.run(main())
    assert (result["cli_exit"], result["check_exit"], result["score"]) == (0, 0, 1.0), result
    [episode] = (tmp_path / "ep").iterdir()
    assert (episode / "workspace" / "seen.txt").read_text() == "no-test\n"
    assert _containers(episode.name) == []
