"""sandbox=container with podman, on an image built here from scratch (``podman import`` of
a tarball of a few host programs and the libraries they and the bridge's Python load; no
registry): the container shows its image and the binds only (no home, no other episode,
no project checkout), takes writes only in its folder, has no network; a fork bomb and a
memory hog end their own runs while one beside them finishes; a daemonized tree dies at
the budget with its container; a whole episode runs through the bridge and is scored by
its check in a second container. Rootless: the same as a user who is not root (this
process's user, or ``$AGENTRL_ROOTLESS_USER`` / ``agentrl-rootless`` through ``runuser``
when the tests run as root), with the limits rootless podman can set and the fallbacks of
those it cannot. Skipped, saying why, where podman is absent or cannot run a container
here. The flags themselves are checked without podman."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import os
import pwd
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from agentrl.agents import container as container_module
from agentrl.agents.cage import SandboxSpec, same_place
from agentrl.agents.container import (
    ROOTFUL,
    ContainerSandbox,
    PodmanHost,
    container_argv,
    find_podman,
    podman_host,
)
from agentrl.agents.harness import AgentOptions, Harness, run_episode
from agentrl.agents.limits import EpisodeLimits, cgroup_support

PROGRAMS = ("sh", "bash", "cat", "ls", "echo", "touch", "head", "sleep", "setsid", "grep")
MARK = "318.25"  # a sleep length no other process uses
PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
NO_LIMITS = EpisodeLimits(None, None, None, None)
ROOTLESS_USER_ENV = "AGENTRL_ROOTLESS_USER"  # a user who is not root, with /etc/subuid ranges
ROOTLESS_USER = "agentrl-rootless"            # the one tried where that is not set
BOMB = """import os, time
forked = 0
for _ in range(300):
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        forked += 1
    except OSError:
        break
print(forked, flush=True)
time.sleep(60)"""  # how many processes it could start, then the budget


def _libraries(path: str) -> set[str]:
    out = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30).stdout
    return set(re.findall(r"(/\S+) \(0x", out))


def _root_files(python: Path = PYTHON, base_prefix: str = sys.base_prefix) -> list[str]:
    """The programs, the libraries they (and the bridge's Python with its C modules) load;
    ``python`` itself too where it lies in the system's folders (a binding does not show
    it: the image must)."""
    files = {os.path.realpath(shutil.which(p)) for p in PROGRAMS if shutil.which(p)}
    files |= {shutil.which(p) for p in PROGRAMS if shutil.which(p)}
    if base_prefix == "/usr":
        files.add(str(python))
    loaded = [*files, str(python.resolve()),
              *map(str, Path(base_prefix).glob("lib/python3*/lib-dynload/*.so"))]
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
        for top, mode in (("etc", 0o755), ("tmp", 0o1777)):  # /tmp's tmpfs takes its mode
            folder = tarfile.TarInfo(top)
            folder.type, folder.mode = tarfile.DIRTYPE, mode
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


def _import(prefix: list[str], files: list[str]) -> str:
    """The image of ``files`` in the store of ``prefix``'s podman (rebuilt when they change);
    a skip where podman cannot import one."""
    digest = hashlib.sha256("\n".join(["tmp 1777", *(f"{f}:{os.stat(f).st_size}"
                                                      for f in files)]).encode())
    name = f"localhost/agentrl-test-root:{digest.hexdigest()[:12]}"
    if subprocess.run([*prefix, "image", "exists", name], timeout=60).returncode != 0:
        built = subprocess.run([*prefix, "import", "-", name], input=_tarball(files),
                               capture_output=True, timeout=300)
        if built.returncode != 0:
            pytest.skip(f"podman cannot import an image here: {built.stderr.decode()[-300:]}")
    return name


def _runtime(prefix: list[str], image: str) -> str | None:
    """The runtime to name (``$AGENTRL_PODMAN_RUNTIME``, else None where podman's default
    runs ``image``, else ``runc`` where it does); a skip saying why where none does."""
    named = os.environ.get(container_module.RUNTIME_ENV)
    why = _try([*prefix, *(["--runtime", named] if named else [])], image)
    if why is None:
        return named
    if named is None and shutil.which("runc") and \
            _try([*prefix, "--runtime", "runc"], image) is None:
        return "runc"
    pytest.skip(f"podman cannot run a container here: {why}")


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
    name = _import([podman], _root_files())
    runtime = _runtime([podman], name)
    with pytest.MonkeyPatch.context() as patch:
        if runtime is not None:
            patch.setenv(container_module.RUNTIME_ENV, runtime)
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


def test_rootless_flags_leave_out_the_limits_podman_cannot_set(tmp_path):
    spec = SandboxSpec(kind="container", workdir=tmp_path, image="img:1", open_files=10**9,
                       limits=EpisodeLimits(memory_mb=128, pids=64, cpus=0.5))
    v1 = PodmanHost(rootless=True, cgroup_version="v1", controllers=frozenset())
    argv = container_argv(spec, ["podman"], "ep", tmp_path / "pid", ["true"], {}, v1)
    assert "--userns=keep-id" in argv and "--ulimit=nproc=64:64" in argv
    assert f"--ulimit=data={128 << 20}:{128 << 20}" in argv  # the memory, per process
    assert not [a for a in argv if a.startswith(("--memory", "--pids-limit", "--cpus"))]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert f"--ulimit=nofile={hard}:{hard}" in argv  # no more than the trainer may set
    assert v1.unenforced(spec.limits) == ["memory", "pids", "cpu"]
    warning = v1.unenforced_warning(spec.limits)
    assert "rootless podman on cgroup v1 cannot limit a container's memory, pids, cpu" in warning
    assert "--ulimit data" in warning and "episode_cpus does not hold" in warning
    v2 = PodmanHost(rootless=True, cgroup_version="v2", controllers=frozenset({"memory", "pids"}))
    argv = container_argv(spec, ["podman"], "ep", tmp_path / "pid", ["true"], {}, v2)
    assert {"--memory=128m", "--pids-limit=64", "--userns=keep-id"} <= set(argv)
    assert not [a for a in argv if a.startswith(("--cpus", "--ulimit=data"))]
    assert v2.unenforced(spec.limits) == ["cpu"]
    assert ROOTFUL.unenforced(spec.limits) == [] and ROOTFUL.unenforced_warning(spec.limits) is None
    assert "--userns=keep-id" not in container_argv(spec, ["podman"], "ep", tmp_path / "pid",
                                                    ["true"], {})


def test_podman_info_says_rootless_and_which_controllers(tmp_path):
    def fake(name: str, info: dict | None) -> tuple[str, ...]:
        script = tmp_path / name
        out = f"echo '{json.dumps(info)}'" if info else "echo 'Error: no runtime' >&2; exit 125"
        script.write_text(f"#!/bin/sh\n{out}\n")
        script.chmod(0o755)
        return (str(script),)

    v1 = {"host": {"security": {"rootless": True}, "cgroupVersion": "v1",
                   "cgroupControllers": []}}
    v2 = {"host": {"security": {"rootless": True}, "cgroupVersion": "v2",
                   "cgroupControllers": ["cpuset", "memory", "pids"]}}
    root = {"host": {"security": {"rootless": False}, "cgroupVersion": "v1"}}
    assert podman_host(fake("v1", v1)) == PodmanHost(True, "v1", frozenset())
    assert podman_host(fake("v2", v2)) == PodmanHost(True, "v2", frozenset({"memory", "pids"}))
    assert podman_host(fake("root", root)) == ROOTFUL
    with pytest.raises(RuntimeError, match="podman cannot run here: Error: no runtime"):
        podman_host(fake("broken", None))


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
    episode = _episode(tmp_path / "ep", image)
    assert episode["scored"] == [0, 0, 1.0], episode
    assert episode["seen"] == "no-test\n"  # the check's file unseen by the CLI
    assert episode["left"] == []


@dataclass(frozen=True)
class Rootless:
    """How to run a command as the non-root user, and what its episodes run on."""

    prefix: tuple[str, ...]  # runuser ... env ... (empty where this process is not root)
    uid: int
    home: Path
    python: str              # an interpreter that user may run, agentrl importable
    base_prefix: str         # its sys.base_prefix
    image: str
    runtime: str | None


def _as_user(user: pwd.struct_passwd) -> tuple[str, ...]:
    """The prefix that runs a command as ``user``, with a runtime folder of its own."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("runuser") is None:
        pytest.skip("runuser is missing: cannot run podman as a user who is not root")
    runtime = Path(f"/run/user/{user.pw_uid}")
    if not runtime.is_dir():
        runtime.mkdir(parents=True, mode=0o700)
        os.chown(runtime, user.pw_uid, user.pw_gid)
    return ("runuser", "-u", user.pw_name, "--", "env", f"HOME={user.pw_dir}",
            f"XDG_RUNTIME_DIR={runtime}", f"USER={user.pw_name}")


def _python_for(prefix: tuple[str, ...]) -> tuple[str, str, str]:
    """(interpreter, its base prefix, PYTHONPATH) that the user runs with agentrl importable:
    this one, or, where the user cannot run it (a pyenv under /root), the system's of the
    same version with this project and its site-packages on the path."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join([root, *__import__("site").getsitepackages()])
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    probe = "import sys, agentrl.agents.container, httpx, pytest; print(sys.base_prefix)"
    for python in (sys.executable, f"/usr/bin/{version}"):
        done = subprocess.run([*prefix, "env", f"PYTHONPATH={path}", python, "-c", probe],
                              capture_output=True, text=True, timeout=60, cwd="/")
        if done.returncode == 0:
            return python, done.stdout.strip(), path
    pytest.skip(f"the rootless test's user cannot run {sys.executable} nor a system "
                f"{version} that imports agentrl: {done.stderr.strip()[-200:]}")


@pytest.fixture(scope="module")
def rootless() -> Rootless:
    """A user who is not root (this process's, or ``$AGENTRL_ROOTLESS_USER`` /
    ``agentrl-rootless`` when this runs as root), podman as that user, an image in its
    store; a skip saying what is missing."""
    podman = find_podman()
    if podman is None:
        pytest.skip("podman is not installed (apt-get install podman, or AGENTRL_PODMAN)")
    name = os.environ.get(ROOTLESS_USER_ENV, ROOTLESS_USER) if os.geteuid() == 0 else None
    try:
        user = pwd.getpwnam(name) if name else pwd.getpwuid(os.geteuid())
    except KeyError:
        pytest.skip(f"no user {name!r} to run rootless podman as (useradd -m {name}: Debian "
                    f"gives it /etc/subuid and /etc/subgid ranges; or set {ROOTLESS_USER_ENV})")
    subuid = Path("/etc/subuid")
    if not any(line.split(":")[0] in (user.pw_name, str(user.pw_uid))
               for line in (subuid.read_text().splitlines() if subuid.exists() else [])):
        pytest.skip(f"{user.pw_name} has no /etc/subuid range: rootless podman needs one")
    prefix = _as_user(user)
    python, base_prefix, path = _python_for(prefix)
    prefix = (*prefix, "env", f"PYTHONPATH={path}") if prefix else ("env", f"PYTHONPATH={path}")
    files = _root_files(Path(python).resolve() if base_prefix == "/usr" else Path(python),
                        base_prefix)
    image = _import([*prefix, podman], files)
    return Rootless(prefix, user.pw_uid, Path(user.pw_dir), python, base_prefix, image,
                    _runtime([*prefix, podman], image))


def _rootless_child(folder: str, image: str, stdlib: str) -> None:
    """Run as the user who is not root (a subprocess of the test): each case, and one JSON
    line of what each showed."""
    folder = Path(folder)
    warnings: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger(container_module.__name__).addHandler(handler)
    home = Path.home()
    limits = EpisodeLimits(memory_mb=128, pids=64, cpus=0.5, disk_mb=2)
    python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    cases = {
        "isolation": (f"cat {home}/.agentrl-secret 2>/dev/null || echo hidden; "
                      f"echo home: $(ls -A {home} 2>/dev/null) :home; echo $UID; "
                      "touch /etc/x 2>/dev/null || echo ro; "
                      f"echo x > {home}/written 2>/dev/null || echo denied; "
                      f"echo x > {folder}/outside 2>/dev/null || echo denied; "
                      f"{python} -c \"import socket; socket.create_connection(('1.1.1.1', 80), 2)"
                      "\" 2>/dev/null || echo no-network; echo in > inside.txt", NO_LIMITS, 60),
        "hog": (f"{python} -c 'x = bytearray(1 << 30); print(len(x))' 2>&1 | grep -o "
                "'MemoryError$'",
                limits, 60),
        "bomb": (f"{python} -c '{BOMB}'", limits, 8),
        "calm": ("sleep 3; echo calm > out.txt; cat out.txt", limits, 60),
        "disk": ("head -c 8388608 /dev/zero > big; sleep 30", limits, 30),
        "daemon": (f"setsid sleep {MARK} & sleep {MARK} & echo started; wait", NO_LIMITS, 3),
    }

    async def one(name: str, script: str, case_limits: EpisodeLimits, timeout: float):
        spec = SandboxSpec(kind="container", workdir=folder / name / "work",
                           writable=((folder / name / "work", folder / name / "work"),),
                           image=image, limits=case_limits, ro_binds=(stdlib,),
                           name=f"agentrl-rootless-{folder.name}-{name}",
                           watched=(folder / name / "work",))
        spec.workdir.mkdir(parents=True)
        result, took = await _run(spec, script, timeout)
        return name, {"stopped": result.stopped, "limit": result.limit, "took": took,
                      "returncode": result.returncode, "stdout": result.stdout,
                      "left": _containers(spec.name)}

    async def main():
        return dict(await asyncio.gather(*(one(n, *c) for n, c in cases.items())))

    started = time.monotonic()
    report = {"results": asyncio.run(main()), "all_s": time.monotonic() - started}
    host = podman_host(tuple(container_module.podman_prefix()))
    report["host"] = [host.rootless, host.cgroup_version, sorted(host.controllers)]
    report["warnings"] = warnings
    report["marks"] = [p for p in filter(str.isdigit, os.listdir("/proc"))
                       if os.path.exists(f"/proc/{p}/cmdline")
                       and MARK.encode() in Path(f"/proc/{p}/cmdline").read_bytes()]
    report["episode"] = _episode(folder / "ep", image, (stdlib,))
    print(json.dumps(report))


def _episode(root: Path, image: str, ro_binds: tuple[str, ...] = ()) -> dict:
    """A whole episode of a fake CLI through the bridge, scored by its check."""
    cli = root.parent / "fake-cli"
    cli.write_text('#!/bin/sh\necho "$1" > prompt.txt; echo "$FAKE_URL" > url.txt\n'
                   'cat test_hidden.txt > seen.txt 2>/dev/null || echo no-test > seen.txt\n')
    cli.chmod(0o755)
    harness = Harness(name="fake", binary_env="AGENTRL_FAKE_BIN", binary_name="fake-cli",
                      args_env="AGENTRL_FAKE_ARGS",
                      command=lambda binary, prompt, home, extra: [binary, prompt],
                      environment=lambda home: {"FAKE_URL": "http://127.0.0.1:{port}"},
                      prepare_home=lambda home: None, final_text=lambda out: out)
    options = AgentOptions(binary=str(cli), sandbox="container", image=image,
                           root=str(root), keep=True, ro_binds=ro_binds)
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
    [episode] = root.iterdir()
    return {"scored": [result["cli_exit"], result["check_exit"], result["score"]],
            "seen": (episode / "workspace" / "seen.txt").read_text(),
            "left": _containers(episode.name)}


def test_a_trainer_that_is_not_root_runs_episodes_in_rootless_containers(tmp_path, rootless):
    secret = rootless.home / ".agentrl-secret"
    secret.write_text("SECRET\n")
    os.chown(tmp_path, rootless.uid, -1)
    env = {**os.environ, **({container_module.RUNTIME_ENV: rootless.runtime}
                            if rootless.runtime else {})}
    stdlib = str(Path(rootless.base_prefix) / "lib" /
                 f"python{sys.version_info[0]}.{sys.version_info[1]}")
    child = (f"import runpy; runpy.run_path({str(Path(__file__))!r})['_rootless_child']"
             f"({str(tmp_path)!r}, {rootless.image!r}, {stdlib!r})")
    try:
        done = subprocess.run([*rootless.prefix, rootless.python, "-c", child], env=env,
                              capture_output=True, text=True, timeout=300, cwd="/")
    finally:
        secret.unlink()
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    results = report["results"]
    rootless_, version, controllers = report["host"]
    assert rootless_ is True
    # isolation: the user's home and its secret unseen, the root and the folders beside the
    # workspace read-only, no network; what runs is the user (keep-id), its writes its own
    seen = results["isolation"]["stdout"].split()
    assert "SECRET" not in results["isolation"]["stdout"] and seen[0] == "hidden"
    assert seen[seen.index("home:") + 1] == ":home"
    after = seen[seen.index(":home") + 1:]
    assert after == [str(rootless.uid), "ro", "denied", "denied", "no-network"], after
    assert not (rootless.home / "written").exists() and not (tmp_path / "outside").exists()
    inside = tmp_path / "isolation" / "work" / "inside.txt"
    assert inside.read_text() == "in\n" and inside.stat().st_uid == rootless.uid
    # the limits: by the container's cgroup where podman may set it, else the fallback
    hog, bomb, calm = results["hog"], results["bomb"], results["calm"]
    if "memory" in controllers:
        assert (hog["stopped"], hog["limit"]) == ("limit", "memory")
    else:  # RLIMIT_DATA: the allocation fails in the process, the episode goes on
        assert (hog["stopped"], hog["stdout"]) == ("exit", "MemoryError\n")
    if "pids" in controllers:
        assert (bomb["stopped"], bomb["limit"]) == ("limit", "pids")
    else:  # RLIMIT_NPROC of the container's own user namespace: 64 tasks, then the budget
        assert bomb["stopped"] == "timeout" and int(bomb["stdout"].split()[0]) <= 64
    assert (calm["stopped"], calm["returncode"], calm["stdout"]) == ("exit", 0, "calm\n")
    assert (results["disk"]["stopped"], results["disk"]["limit"]) == ("limit", "disk")
    assert results["disk"]["took"] < 20
    daemon = results["daemon"]
    assert (daemon["stopped"], daemon["stdout"]) == ("timeout", "started\n")
    assert daemon["took"] < 15 and report["marks"] == []
    assert all(r["left"] == [] for r in results.values())
    missing = [c for c in ("memory", "pids", "cpu") if c not in controllers]
    named = [w for w in report["warnings"] if "rootless podman" in w]  # the cases', the episode's
    assert len(named) == (2 if missing else 0), report["warnings"]
    assert not missing or f"cannot limit a container's {', '.join(missing)} (" in named[0]
    # a whole episode through the bridge, its check in a second container
    assert report["episode"] == {"scored": [0, 0, 1.0], "seen": "no-test\n", "left": []}
