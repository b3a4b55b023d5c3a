"""The sandbox server against hostile code, started as `agentrl sandbox` in a subprocess.

Every hostile program is bounded in the test itself (the fork flood tries a fixed number of
forks), so a broken limit fails the test instead of taking the machine down. After every
run the test checks that no process of the run survives.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

REPO = Path(__file__).resolve().parents[3]
MAX_PROCESSES = 32
MAX_OUTPUT = 65536
MAX_CONCURRENT = 2
UID_BASE = 1_500_000  # asked for; the server may move to a free range (UIDS)
UIDS = {"base": UID_BASE}  # the range the module's server runs as, from its /health


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """`agentrl sandbox` with small limits and a secret in its environment."""
    port = _free_port()
    env = {**os.environ, "SECRET_TOKEN": "s3cr3t-do-not-leak"}
    cmd = [
        sys.executable, "-m", "agentrl.cli", "--log-level", "WARNING", "sandbox",
        "--port", str(port),
        "--max-processes", str(MAX_PROCESSES),
        "--max-output-bytes", str(MAX_OUTPUT),
        "--max-concurrent", str(MAX_CONCURRENT),
        "--max-run-timeout", "30",
        "--uid-base", str(UID_BASE),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            health = httpx.get(f"{url}/health", timeout=1).json()
            UIDS["base"] = health["limits"]["uid_base"]
            break
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(
                    f"sandbox server did not start: {proc.stderr.read()!r}"
                ) from None
            time.sleep(0.1)
    try:
        yield {"url": url, "port": port, "pid": proc.pid, "health": health}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def _run(server, code: str, run_timeout: float = 5.0, **fields) -> tuple[dict, float]:
    start = time.monotonic()
    resp = httpx.post(
        f"{server['url']}/run_code",
        json={"code": code, "language": "python", "run_timeout": run_timeout, **fields},
        timeout=run_timeout + 30,
    )
    elapsed = time.monotonic() - start
    assert resp.status_code == 200, resp.text
    return resp.json(), elapsed


def _sandbox_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info["uids"]
        if uids is not None and UIDS["base"] <= uids.real < UIDS["base"] + MAX_CONCURRENT:
            found.append(proc)
    return found


def assert_nothing_left(server) -> None:
    """No child of the server and no process of a sandbox uid survives the run."""
    deadline = time.monotonic() + 3
    while True:
        children = psutil.Process(server["pid"]).children(recursive=True)
        leftovers = children + _sandbox_processes()
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert leftovers == [], [(p.pid, p.name()) for p in leftovers]


def test_health_reports_isolation_and_limits(server):
    health = server["health"]
    assert health["status"] == "ok"
    assert set(health["isolation"]) == {
        "network",
        "pid_namespace",
        "mount_namespace",
        "private_proc",
        "unprivileged_user",
        "separate_user",
        "ipc_namespace",
        "read_only_host",
        "seccomp",
        "cgroup",
    }
    assert (health["busy_slots"], health["queue_depth"]) == (0, 0)
    assert health["limits"]["max_processes"] == MAX_PROCESSES
    assert health["limits"]["max_output_bytes"] == MAX_OUTPUT


def test_hello_world_succeeds(server):
    body, _ = _run(server, "print(sum(range(10)))")
    assert body["status"] == "Success"
    assert body["message"] == ""
    run = body["run_result"]
    assert (run["status"], run["return_code"], run["stdout"], run["stderr"]) == (
        "Finished",
        0,
        "45\n",
        "",
    )
    assert body["isolation"] == server["health"]["isolation"]
    assert_nothing_left(server)


def test_exception_is_a_failed_run_with_traceback(server):
    body, _ = _run(server, "print('before')\n1 / 0")
    assert body["status"] == "Failed"
    run = body["run_result"]
    assert (run["status"], run["return_code"], run["stdout"]) == ("Finished", 1, "before\n")
    assert run["stderr"].rstrip().endswith("ZeroDivisionError: division by zero")


def test_stdin_is_passed(server):
    body, _ = _run(server, "print(input()[::-1])", stdin="abc\n")
    assert body["run_result"]["stdout"] == "cba\n"


def test_infinite_loop_times_out_and_is_killed(server):
    body, elapsed = _run(server, "print('start', flush=True)\nwhile True: pass", run_timeout=1.0)
    assert body["status"] == "Failed"
    assert body["run_result"]["status"] == "TimeLimitExceeded"
    assert body["run_result"]["return_code"] is None
    assert body["run_result"]["stdout"] == "start\n"
    assert "run_timeout of 1 s exceeded" in body["message"]
    assert 1.0 <= elapsed < 4.0
    assert_nothing_left(server)


def test_fork_flood_is_bounded_by_nproc(server):
    # 5000 fork attempts; children sleep briefly and exit. Zombies count against
    # RLIMIT_NPROC until reaped, so exactly MAX_PROCESSES - 1 forks can succeed.
    code = """
import os, time
ok = failed = 0
for _ in range(5000):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        time.sleep(0.2)
        os._exit(0)
    ok += 1
for _ in range(ok):
    os.wait()
print(ok, failed)
"""
    body, elapsed = _run(server, code, run_timeout=10.0)
    assert body["status"] == "Success", body
    ok, failed = map(int, body["run_result"]["stdout"].split())
    assert (ok, failed) == (MAX_PROCESSES - 1, 5000 - (MAX_PROCESSES - 1))
    assert elapsed < 10.0
    assert_nothing_left(server)


def test_background_process_does_not_outlive_the_run(server):
    # A daemonized child (new session, parent exits at once) must still die with the run.
    code = """
import os, time
if os.fork() == 0:
    os.setsid()
    time.sleep(60)
    os._exit(0)
print("parent done")
"""
    body, elapsed = _run(server, code)
    assert body["run_result"]["stdout"] == "parent done\n"
    assert elapsed < 3.0
    assert_nothing_left(server)


def test_4gb_allocation_fails_with_memory_error(server):
    body, elapsed = _run(server, "x = bytearray(4 * 1024**3)\nprint(len(x))")
    run = body["run_result"]
    assert body["status"] == "Failed"
    assert (run["status"], run["return_code"], run["stdout"]) == ("Finished", 1, "")
    assert run["stderr"].rstrip().endswith("MemoryError")
    assert elapsed < 5.0
    assert_nothing_left(server)


def test_memory_limit_from_request_can_only_lower_the_servers(server):
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20)"
    lowered, _ = _run(server, code, memory_limit_MB=256)
    raised, _ = _run(server, code, memory_limit_MB=1 << 20)
    default, _ = _run(server, code, memory_limit_MB=-1)
    assert lowered["run_result"]["stdout"] == "256\n"
    assert raised["run_result"]["stdout"] == "1024\n"
    assert default["run_result"]["stdout"] == "1024\n"


def test_100mb_of_stdout_is_truncated_and_stopped(server):
    code = """
import sys
line = "x" * 1023 + "\\n"
for _ in range(100 * 1024):
    sys.stdout.write(line)
"""
    body, elapsed = _run(server, code, run_timeout=20.0)
    run = body["run_result"]
    assert body["status"] == "Failed"
    assert run["status"] == "Error"
    assert run["stdout_truncated"] is True and run["stderr_truncated"] is False
    assert len(run["stdout"]) == MAX_OUTPUT
    assert run["stdout"] == ("x" * 1023 + "\n") * (MAX_OUTPUT // 1024)
    assert f"stdout exceeded {MAX_OUTPUT} bytes" in body["message"]
    assert elapsed < 3.0
    assert_nothing_left(server)


def test_writing_outside_the_workdir_is_denied(server):
    targets = ["/etc/agentrl_sandbox_probe", "/root/agentrl_sandbox_probe"]
    targets.append(str(REPO / "agentrl_sandbox_probe"))  # the server's cwd
    code = f"""
import json, os
result = {{}}
for path in {targets!r}:
    try:
        with open(path, "w") as f:
            f.write("pwned")
        result[path] = "written"
    except OSError as e:
        result[path] = type(e).__name__
with open("inside.txt", "w") as f:
    f.write("ok")
result["inside"] = open("inside.txt").read()
result["cwd"] = os.getcwd()
print(json.dumps(result))
"""
    body, _ = _run(server, code)
    result = json.loads(body["run_result"]["stdout"])
    # Denied either way: OSError (EROFS) where the host's file systems are read-only inside
    # the run, PermissionError on a visible directory, FileNotFoundError when the directory
    # lies under a path the sandbox replaces with a private mount (/tmp).
    denied = ("OSError", "PermissionError") if server["health"]["isolation"][
        "read_only_host"] else ("PermissionError",)
    assert result["/etc/agentrl_sandbox_probe"] in denied
    assert result["/root/agentrl_sandbox_probe"] in denied
    assert result[targets[2]] in (*denied, "FileNotFoundError")
    assert result["inside"] == "ok"
    for path in targets:
        assert not os.path.exists(path)
    assert not os.path.exists(result["cwd"])  # the run's directory is deleted afterwards
    assert_nothing_left(server)


def test_connecting_to_the_host_loopback_is_refused(server):
    if not server["health"]["isolation"]["network"]:
        pytest.skip(f"no network namespace on this machine: {server['health']['notes']}")
    code = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {server["port"]}), timeout=2)
    print("connected")
except OSError as e:
    print(type(e).__name__)
"""
    body, elapsed = _run(server, code)
    assert body["run_result"]["stdout"] == "ConnectionRefusedError\n"
    assert elapsed < 3.0


def test_server_environment_is_not_visible(server):
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    body, _ = _run(server, code)
    env = json.loads(body["run_result"]["stdout"])
    assert "SECRET_TOKEN" not in env
    assert "s3cr3t-do-not-leak" not in body["run_result"]["stdout"]
    assert set(env) <= {
        "PATH",
        "LANG",
        "LC_CTYPE",
        "HOME",
        "TMPDIR",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
    }
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"


def test_server_process_environ_is_not_readable(server):
    code = f"""
try:
    print(open("/proc/{server["pid"]}/environ", "rb").read()[:20])
except OSError as e:
    print(type(e).__name__)
"""
    body, _ = _run(server, code)
    # Hidden by a private /proc, or refused to an unprivileged uid.
    assert body["run_result"]["stdout"] in ("FileNotFoundError\n", "PermissionError\n")


def test_runs_as_an_unprivileged_uid(server):
    if not server["health"]["isolation"]["separate_user"]:
        pytest.skip("the server is not root: no per-run uid")
    body, _ = _run(server, "import os; print(os.getuid(), os.getgid(), os.getgroups())")
    uid, gid, groups = body["run_result"]["stdout"].split(" ", 2)
    assert UIDS["base"] <= int(uid) < UIDS["base"] + MAX_CONCURRENT
    assert gid == uid
    assert groups == "[]\n"


def test_unsupported_language_is_a_400(server):
    resp = httpx.post(
        f"{server['url']}/run_code", json={"code": "int main(){}", "language": "cpp"}, timeout=10
    )
    assert resp.status_code == 400
    assert "unsupported language 'cpp'" in resp.json()["detail"]


def test_run_timeout_over_the_maximum_is_a_400(server):
    resp = httpx.post(
        f"{server['url']}/run_code", json={"code": "1", "run_timeout": 31}, timeout=10
    )
    assert resp.status_code == 400
    assert "run_timeout must be in (0, 30]" in resp.json()["detail"]


def test_missing_code_is_a_422(server):
    resp = httpx.post(f"{server['url']}/run_code", json={"language": "python"}, timeout=10)
    assert resp.status_code == 422


def test_files_are_placed_in_the_workdir(server):
    data = base64.b64encode(b"1 2 3").decode()
    body, _ = _run(server, "print(sum(map(int, open('nums.txt').read().split())))",
                   files={"nums.txt": data})  # fmt: skip
    assert body["run_result"]["stdout"] == "6\n"


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"files": {"../x": ""}}, 400, "files: bad name '../x'"),
        ({"files": {"a.txt": "%%%"}}, 400, "files['a.txt'] is not valid base64"),
        ({"fetch_files": ["out.txt"]}, 400, "fetch_files is not supported"),
        ({"code": "#" * (2 << 20)}, 413, "over max_code_bytes=1048576"),
        ({"code": "print(1)", "stdin": "\ud800"}, 400, "stdin is not valid UTF-8 text"),
    ],
)
def test_bad_requests_name_the_problem(server, fields, status, message):
    # json.dumps escapes a lone surrogate as \ud800, which httpx's json= cannot encode.
    resp = httpx.post(
        f"{server['url']}/run_code",
        content=json.dumps({"code": "1", **fields}),
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert resp.status_code == status
    assert message in resp.json()["detail"]
