"""An OpenEnv environment's server app run in a child process on a loopback port.

`agentrl env prepare openenv:MODULE` and the OpenEnv interaction start the server of an
installed environment themselves, the way OpenEnv's own runtime does (uvicorn on
``MODULE:app``, ready when ``GET /health`` answers 200):

    server = start_server("echo_env.server.app")      # or "pkg.mod:attr"
    server.base_url                                   # "http://127.0.0.1:PORT"
    server.stop()                                     # also at interpreter exit

The socket is bound here and handed to uvicorn (``--fd``), so no other process can take the
port between picking and binding it. A child process keeps the environment's code, its
threads and its crashes out of the rollout's process. A server that exits or does not
answer within ``timeout`` seconds is an error that quotes the end of its log.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import httpx

logger = logging.getLogger(__name__)

_LOG_TAIL_CHARS = 3000


def app_path(module: str) -> str:
    """``pkg.mod`` -> ``pkg.mod:app`` (OpenEnv's convention); ``pkg.mod:attr`` is kept."""
    module = module.strip()
    return module if ":" in module else f"{module}:app"


def _log_tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError:
        return ""


def _stop(process: subprocess.Popen, log: Path, grace: float = 5.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:  # a step still sleeping in a worker thread
            process.kill()
            process.wait(timeout=grace)
    log.unlink(missing_ok=True)


class OpenEnvServer:
    """A running OpenEnv server (see the module docstring)."""

    def __init__(self, app: str, process: subprocess.Popen, port: int, log: Path) -> None:
        self.app, self.process, self.log = app, process, log
        self.base_url = f"http://127.0.0.1:{port}"
        self._finalizer = weakref.finalize(self, _stop, process, log)  # runs at exit too

    def stop(self) -> None:
        """Terminate the server (killed after a 5 s grace); a second call does nothing."""
        self._finalizer()

    def wait_ready(self, timeout: float) -> None:
        """Poll ``/health`` until 200 (RuntimeError, server stopped, if it exits or times out)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                tail = _log_tail(self.log)
                self.stop()
                raise RuntimeError(f"the OpenEnv server {self.app} exited with code "
                                   f"{self.process.returncode} before it answered:\n{tail}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                tail = _log_tail(self.log)
                self.stop()
                raise RuntimeError(f"the OpenEnv server {self.app} did not answer /health "
                                   f"within {timeout:g}s:\n{tail}")
            time.sleep(0.1)


def start_server(module: str, timeout: float = 60.0) -> OpenEnvServer:
    """Start ``python -m uvicorn MODULE:app`` on a free loopback port and wait until ready."""
    app = app_path(module)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    fd, log_name = tempfile.mkstemp(prefix="agentrl-openenv-", suffix=".log")
    os.close(fd)
    log = Path(log_name)
    command = [sys.executable, "-m", "uvicorn", app, "--fd", str(sock.fileno()),
               "--log-level", "warning"]
    with sock, log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   pass_fds=(sock.fileno(),), stdin=subprocess.DEVNULL)
    server = OpenEnvServer(app, process, port, log)
    server.wait_ready(timeout)
    logger.info("OpenEnv server %s at %s (pid %d)", app, server.base_url, process.pid)
    return server


__all__ = ["OpenEnvServer", "app_path", "start_server"]
