"""SandboxRunner in-process: statuses, limits, concurrency, cancellation, weaker isolation."""

from __future__ import annotations

import asyncio
import glob
import os
import tempfile
import time

import psutil
import pytest

from envs.sandbox.config import SandboxConfig
from envs.sandbox.isolation import probe_isolation
from envs.sandbox.runner import SandboxRunner
from envs.sandbox.uid_range import claim_uid_range

UIDS = {"base": 1_600_000}  # the range this module's runners hold (the uids fixture claims it)


@pytest.fixture(scope="module", autouse=True)
def uids():
    """Claim a uid range as the server does: a sandbox server of another test running at the
    same time (pytest-xdist) ends its stragglers by uid and must not own these."""
    config, held = claim_uid_range(SandboxConfig(uid_base=UIDS["base"], max_concurrent=2))
    UIDS["base"] = config.uid_base
    yield config.uid_base
    if held is not None:
        held.release()


def _config(**overrides) -> SandboxConfig:
    return SandboxConfig(uid_base=UIDS["base"], max_concurrent=2, **overrides).validate()


@pytest.fixture(scope="module")
def full(uids):
    config = _config(max_output_bytes=4096)
    return config, probe_isolation(config)


@pytest.fixture(scope="module")
def no_pid_namespace(uids):
    config = _config(pid_namespace=False)
    return config, probe_isolation(config)


@pytest.fixture(scope="module")
def no_namespaces(uids):
    config = _config(network_namespace=False, pid_namespace=False, mount_namespace=False)
    return config, probe_isolation(config)


def _run(setup, code: str, run_timeout: float = 5.0, **kwargs):
    config, isolation = setup
    return asyncio.run(SandboxRunner(config, isolation).run(code, run_timeout, **kwargs))


def _sandbox_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info["uids"]
        if uids is not None and UIDS["base"] <= uids.real < UIDS["base"] + 2:
            found.append(proc)
    return found


_CHILDREN_BEFORE: set[int] = set()  # this process's children when the current test began


@pytest.fixture(autouse=True)
def _children_before_the_test():
    """Children this test did not start (a multiprocessing resource tracker that an earlier
    test in the random order started lives as long as pytest) are not its leftovers."""
    _CHILDREN_BEFORE.clear()
    _CHILDREN_BEFORE.update(p.pid for p in psutil.Process().children(recursive=True))
    yield


def _new_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in _CHILDREN_BEFORE]


def assert_nothing_left() -> None:
    deadline = time.monotonic() + 3
    while (left := _new_children() + _sandbox_processes()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == [], [(p.pid, p.name()) for p in left]


DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    time.sleep(60)
    os._exit(0)
print("parent done")
"""


def test_stderr_flood_is_capped_too(full):
    result = _run(full, "import sys\nwhile True: sys.stderr.write('e' * 1000)")
    assert (result.status, result.stderr_truncated, result.stdout_truncated) == (
        "Error",
        True,
        False,
    )
    assert result.stderr == "e" * 4096
    assert result.message == "stderr exceeded 4096 bytes: output cut, the run was stopped"
    assert_nothing_left()


def test_cpu_rlimit_is_a_time_limit(full):
    code = """
import resource
resource.setrlimit(resource.RLIMIT_CPU, (1, resource.getrlimit(resource.RLIMIT_CPU)[1]))
while True: pass
"""
    result = _run(full, code, run_timeout=10.0)
    assert (result.status, result.return_code) == ("TimeLimitExceeded", -24)
    assert result.message == "CPU time limit exceeded (SIGXCPU)"
    assert result.execution_time < 5.0


def test_killed_by_a_signal(full):
    result = _run(full, "import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), 9)")
    assert (result.status, result.return_code, result.stdout) == ("Finished", -9, "x\n")
    assert result.message == "killed by signal SIGKILL"


def test_rlimits_reach_the_code(full):
    config, _ = full
    code = """
import resource as r
print(*(r.getrlimit(getattr(r, n))[0] for n in
        ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_CPU")))
"""
    result = _run(full, code, run_timeout=3.0, memory_limit_mb=300)
    mib = 1 << 20
    expected = [300 * mib, config.max_file_size_mb * mib, config.max_processes]
    expected += [config.max_open_files, 0, 4]  # cpu: ceil(3 + slack 1)
    assert list(map(int, result.stdout.split())) == expected


def test_file_size_limit(full):
    result = _run(full, "open('big', 'wb').write(b'x' * (17 << 20))")
    assert result.return_code == 1
    assert result.stderr.rstrip().endswith("OSError: [Errno 27] File too large")


def test_private_tmp_is_bounded_and_empty(full):
    config, isolation = full
    if not isolation.mount_namespace:
        pytest.skip(f"no mount namespace here: {isolation.notes}")
    code = """
import os
print(os.listdir("/tmp") == [os.path.basename(os.getcwd())])
written = 0
try:
    for i in range(10):
        with open(f"/tmp/f{i}", "wb") as f:
            f.write(b"x" * (15 << 20))
        written += 1
except OSError as e:
    print(written, e.strerror)
"""
    result = _run(full, code)
    assert result.stdout == "True\n4 No space left on device\n"  # 64 MiB tmpfs
    assert not any(name.startswith("f") and len(name) == 2 for name in os.listdir("/tmp"))


def test_concurrency_cap_queues_runs(full):
    config, isolation = full

    async def three_runs():
        runner = SandboxRunner(config, isolation)  # max_concurrent=2
        start = time.monotonic()
        results = await asyncio.gather(
            *(runner.run("import time; time.sleep(0.5); print('ok')", 5.0) for _ in range(3))
        )
        return results, time.monotonic() - start

    results, elapsed = asyncio.run(three_runs())
    assert [r.stdout for r in results] == ["ok\n"] * 3
    assert elapsed >= 1.0  # the third run waited for a slot


def test_cancelled_run_leaves_nothing(full):
    config, isolation = full
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), f"agentrl-sandbox-{os.getpid()}-*")))

    async def cancel_midway():
        task = asyncio.create_task(
            SandboxRunner(config, isolation).run(DAEMON + "time.sleep(30)", 20)
        )
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    assert_nothing_left()
    after = set(glob.glob(os.path.join(tempfile.gettempdir(), f"agentrl-sandbox-{os.getpid()}-*")))
    assert after - before == set()


def test_without_pid_namespace_stragglers_are_killed_by_uid(no_pid_namespace):
    _, isolation = no_pid_namespace
    if not isolation.separate_user:
        pytest.skip("needs a root server (per-run uid) to sweep stragglers")
    assert isolation.pid_namespace is False
    result = _run(no_pid_namespace, DAEMON)
    assert result.stdout == "parent done\n"
    assert result.execution_time < 2.0
    assert_nothing_left()


def test_without_namespaces_code_still_runs_unprivileged(no_namespaces):
    _, isolation = no_namespaces
    assert (isolation.network, isolation.pid_namespace, isolation.mount_namespace) == (
        False,
        False,
        False,
    )
    assert "network_namespace switched off by the config" in isolation.notes
    result = _run(no_namespaces, "import os; print(os.getuid() != 0, os.getcwd())")
    flag, cwd = result.stdout.split()
    assert flag == str(isolation.unprivileged_user)
    assert not os.path.exists(cwd)  # deleted after the run
    result = _run(no_namespaces, "while True: pass", run_timeout=0.5)
    assert result.status == "TimeLimitExceeded"
    assert_nothing_left()
