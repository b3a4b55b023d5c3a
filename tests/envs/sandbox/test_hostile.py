"""The sandbox against an attacker and a heavy user: nothing a run leaves reaches the next
run, a crash or a disconnect leaves nothing running, no single request stalls the server.

Each test starts `agentrl sandbox` as a subprocess with its own uid range and checks, after
its runs, that no process of those uids and no staging directory is left. Every hostile
program is bounded in the test itself.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the hardened sandbox runs as root (CI does)"),
]

REPO = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `agentrl sandbox` process."""

    def __init__(self, uid_base: int, *args: str) -> None:
        self.uid_base, self.max_concurrent = uid_base, 2
        if "--max-concurrent" in args:
            self.max_concurrent = int(args[args.index("--max-concurrent") + 1])
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "agentrl.cli", "--log-level", "WARNING", "sandbox",
               "--port", str(self.port), "--uid-base", str(uid_base), *args]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.health = httpx.get(f"{self.url}/health", timeout=1).json()
                self.uid_base = self.health["limits"]["uid_base"]  # the range it claimed
                return
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    raise RuntimeError(
                        f"server did not start: {self.proc.stderr.read()!r}") from None
                time.sleep(0.1)

    def run(self, code: str, run_timeout: float = 5.0, **fields) -> dict:
        resp = httpx.post(f"{self.url}/run_code", timeout=run_timeout + 30,
                          json={"code": code, "run_timeout": run_timeout, **fields})
        assert resp.status_code == 200, resp.text
        return resp.json()

    def get_health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=5).json()

    def processes(self) -> list[psutil.Process]:
        uids = range(self.uid_base, self.uid_base + self.max_concurrent)
        return [p for p in psutil.process_iter(["uids"])
                if p.info["uids"] is not None and p.info["uids"].real in uids]

    def staging_dirs(self, pid: int | None = None) -> list[Path]:
        pid = self.proc.pid if pid is None else pid
        return list(Path(tempfile.gettempdir()).glob(f"agentrl-sandbox-{pid}-*"))

    def assert_clean(self, seconds: float = 5.0) -> None:
        deadline = time.monotonic() + seconds
        while (self.processes() or self.staging_dirs()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.processes() == [] and self.staging_dirs() == []

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()


@pytest.fixture(scope="module")
def server():
    started = Server(1_600_000, "--max-concurrent", "4", "--tmpfs-size-mb", "16",
                     "--memory-limit-mb", "256", "--max-queue", "2", "--max-files", "8")
    yield started
    started.stop()


SHM = """
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
IPC_CREAT = 0o1000
shmid = libc.shmget(0x41674E54, {size}, {flags})
out = {{"shmid": shmid, "errno": ctypes.get_errno()}}
if shmid >= 0:
    addr = libc.shmat(shmid, None, 0)
    if {write}:
        ctypes.memset(addr, 0x41, 16)
    out["first"] = ctypes.string_at(addr, 1).decode()
print(json.dumps(out))
"""


def _host_shm_keys() -> set[int]:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines}


def test_sysv_shared_memory_does_not_outlive_its_run(server):
    assert server.health["isolation"]["ipc_namespace"]
    before = _host_shm_keys()
    first = json.loads(server.run(SHM.format(size=32 << 20, flags="IPC_CREAT | 0o666",
                                             write=True))["run_result"]["stdout"])
    assert first["shmid"] >= 0 and first["first"] == "A"
    second = json.loads(server.run(SHM.format(size=0, flags="0o666", write=False))
                        ["run_result"]["stdout"])
    assert second["shmid"] == -1 and second["errno"] == 2  # ENOENT: the next run sees none
    assert 0x41674E54 not in _host_shm_keys() - before  # nor does the host keep it
    server.assert_clean()


LOCK_WRITE = """
import json, os
out = {}
for d in ("/run/lock", "/var/lock", "/var/tmp", "/dev/shm", "/tmp"):
    try:
        with open(os.path.join(d, "agentrl-left-behind"), "w") as f:
            f.write("from the last run")
        out[d] = "written"
    except OSError as e:
        out[d] = e.strerror
print(json.dumps(out))
"""
LOCK_READ = """
import json, os
print(json.dumps({d: os.path.exists(os.path.join(d, "agentrl-left-behind"))
                  for d in ("/run/lock", "/var/lock", "/var/tmp", "/dev/shm", "/tmp")}))
"""


def test_writable_places_are_private_to_the_run(server):
    written = json.loads(server.run(LOCK_WRITE)["run_result"]["stdout"])
    assert set(written.values()) == {"written"}  # writable inside the run ...
    seen = json.loads(server.run(LOCK_READ)["run_result"]["stdout"])
    assert not any(seen.values())  # ... gone for the next run
    for d in ("/run/lock", "/var/tmp", "/dev/shm", "/tmp"):
        assert not os.path.exists(os.path.join(d, "agentrl-left-behind"))  # and the host


FILL = """
import json, os
written = 0
for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
    try:
        with open(os.path.join(d, "fill"), "wb") as f:
            for _ in range(6):
                f.write(b"x" * (1 << 20))
                f.flush()
                written += 1 << 20
    except OSError as e:
        print(json.dumps({"written": written, "error": e.strerror}))
        break
else:
    print(json.dumps({"written": written, "error": None}))
"""


def test_one_disk_budget_covers_every_writable_place(server):
    result = json.loads(server.run(FILL)["run_result"]["stdout"])
    assert result["error"] == "No space left on device"
    assert result["written"] <= 16 << 20  # --tmpfs-size-mb 16 for all places together


SECCOMP = """
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(result):
    return ctypes.get_errno() if result != 0 else 0
print(json.dumps({
    "unshare_user": errno_of(libc.unshare(0x10000000)),
    "unshare_net": errno_of(libc.unshare(0x40000000)),
    "ptrace": errno_of(libc.ptrace(16, 1, 0, 0)),  # PTRACE_ATTACH to pid 1
    "mount": errno_of(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
}))
"""


def test_seccomp_denies_what_code_does_not_need(server):
    if not server.health["isolation"]["seccomp"]:
        pytest.skip("no seccomp on this machine: " + "; ".join(server.health["notes"]))
    denied = json.loads(server.run(SECCOMP)["run_result"]["stdout"])
    assert denied == {"unshare_user": 1, "unshare_net": 1, "ptrace": 1, "mount": 1}  # EPERM
    # threads and subprocesses still work under the filter
    body = server.run("import subprocess, threading\n"
                      "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
                      "print(subprocess.run(['echo', 'child'], capture_output=True, text=True)"
                      ".stdout.strip())")
    assert body["run_result"]["stdout"].split() == ["thread", "child"]


MEMORY = """
import os, time
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        block = bytearray(150 << 20)  # each alone is under the 256 MiB address-space limit
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(1)
        os._exit(0)
    children.append(pid)
print([os.waitpid(pid, 0)[1] for pid in children])
"""


def test_the_memory_limit_covers_all_processes_of_a_run(server):
    if not server.health["isolation"]["cgroup"]:
        pytest.skip("no per-run cgroup on this machine: " + "; ".join(server.health["notes"]))
    body = server.run(MEMORY, run_timeout=20)
    statuses = json.loads(body["run_result"]["stdout"] or "[]")
    killed = [s for s in statuses if os.WIFSIGNALED(s) and os.WTERMSIG(s) == signal.SIGKILL]
    assert killed or body["run_result"]["return_code"] == -signal.SIGKILL  # 450 MiB > 256
    server.assert_clean()


def test_a_disconnected_client_stops_its_run_and_the_queue_is_bounded(server):
    code = "import time\nwhile True:\n    time.sleep(0.1)"
    request = json.dumps({"code": code, "run_timeout": 30}).encode()
    socks = []
    for _ in range(server.max_concurrent + 2):  # every slot busy, and the queue full
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(request) + request)
        socks.append(sock)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        health = server.get_health()
        if (health["busy_slots"], health["queue_depth"]) == (server.max_concurrent, 2):
            break
        time.sleep(0.05)
    assert (health["busy_slots"], health["queue_depth"]) == (server.max_concurrent, 2)
    started = time.monotonic()
    full = httpx.post(f"{server.url}/run_code", json={"code": "print(1)"}, timeout=10)
    assert full.status_code == 503 and "max_queue=2" in full.json()["detail"]
    assert time.monotonic() - started < 3.0  # answered at once, not after a 30 s run
    for sock in socks:  # every client gives up
        sock.close()
    deadline = time.monotonic() + 5
    while server.get_health()["busy_slots"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.get_health()["busy_slots"] == 0  # the abandoned runs were stopped
    server.assert_clean()


def test_many_files_are_refused_at_once(server):
    files = {f"f{i}": "" for i in range(100_000)}
    started = time.monotonic()
    resp = httpx.post(f"{server.url}/run_code", json={"code": "print(1)", "files": files},
                      timeout=30)
    assert resp.status_code == 413 and "max_files=8" in resp.json()["detail"]
    assert time.monotonic() - started < 5.0
    named = {("n" * 100) + str(i): base64.b64encode(b"").decode() for i in range(8)}
    body = server.run("import os\nprint(len([n for n in os.listdir('.') if n.startswith('n')]))",
                      files=named)
    assert body["run_result"]["stdout"].strip() == "8"


NORMAL = "print(sum(range({n})))"
HOSTILE = [
    "import os\nfor _ in range(500):\n    try:\n        os.fork()\n    except OSError:\n"
    "        pass\nimport time; time.sleep(1)",
    "x = bytearray(1 << 40)",
    "while True:\n    pass",
    "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)",
]


def test_normal_runs_succeed_beside_hostile_ones(server):
    jobs = [(NORMAL.format(n=n), 3.0) for n in range(10, 16)]
    jobs += [(code, 2.0) for code in HOSTILE]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(_run_or_503, server, code, timeout) for code, timeout in jobs]
        results = [f.result() for f in futures]
    for n, body in zip(range(10, 16), results[:6], strict=True):
        assert body["status"] == "Success" and body["run_result"]["stdout"] == (
            f"{sum(range(n))}\n")
    server.assert_clean()


def _run_or_503(server: Server, code: str, timeout: float) -> dict:
    """Submit, retrying while the bounded queue is full (a heavy user's client)."""
    while True:
        resp = httpx.post(f"{server.url}/run_code", timeout=60,
                          json={"code": code, "run_timeout": timeout})
        if resp.status_code != 503:
            assert resp.status_code == 200, resp.text
            return resp.json()
        time.sleep(0.1)


def test_a_crashed_server_leaves_nothing_behind():
    crashed = Server(1_700_000, "--max-concurrent", "2")
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
            "time.sleep(60)")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(_run_ignoring_errors, crashed, code)
        deadline = time.monotonic() + 10
        while len(crashed.processes()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(crashed.processes()) >= 2 and crashed.staging_dirs()
        dead_pid = crashed.proc.pid
        crashed.proc.kill()  # kill -9: no clean-up code of the server runs
        crashed.proc.wait()
    deadline = time.monotonic() + 5
    while crashed.processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert crashed.processes() == []  # the runs died with their server
    successor = Server(1_700_000, "--max-concurrent", "2")
    try:
        assert crashed.staging_dirs(dead_pid) == []  # removed by the next server at start
        body = successor.run("import threading\nt = threading.Thread(target=print, "
                             "args=('ok',)); t.start(); t.join()")
        assert body["status"] == "Success" and body["run_result"]["stdout"] == "ok\n"
    finally:
        successor.stop()
        crashed.proc.stderr.close()


def _run_ignoring_errors(server: Server, code: str) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the server is killed under it
        httpx.post(f"{server.url}/run_code", json={"code": code, "run_timeout": 60}, timeout=90)


def _read_until_closed(sock: socket.socket) -> str:
    """Everything the server sends until it closes the connection (it answers 408 with
    ``connection: close``)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_oversized_stalled_and_unparsable_bodies_are_answered_clearly():
    limited = Server(1_800_000, "--max-body-bytes", str(1 << 20), "--body-timeout", "2")
    try:
        big = httpx.post(f"{limited.url}/run_code", timeout=30,
                         json={"code": "print(1)", "padding": "x" * (50 << 20)})
        assert big.status_code == 413 and "max_body_bytes" in big.json()["detail"]
        with socket.create_connection(("127.0.0.1", limited.port)) as sock:
            sock.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                         b"\r\nContent-Length: 100\r\n\r\n{\"code\": ")  # and then nothing
            sock.settimeout(10)
            started = time.monotonic()
            answer = _read_until_closed(sock)  # headers and body may come in two segments
            assert answer.startswith("HTTP/1.1 408") and "body_timeout" in answer
            assert time.monotonic() - started < 5
        bad_utf8 = httpx.post(f"{limited.url}/run_code", content=b'{"code": "\xff"}',
                              headers={"Content-Type": "application/json"}, timeout=10)
        assert bad_utf8.status_code == 400 and "not valid UTF-8" in bad_utf8.json()["detail"]
        deep = httpx.post(f"{limited.url}/run_code", content=b"[" * 100_000 + b"]" * 100_000,
                          headers={"Content-Type": "application/json"}, timeout=10)
        assert deep.status_code == 400 and "nested deeper" in deep.json()["detail"]
        assert limited.get_health()["status"] == "ok"
    finally:
        limited.stop()
