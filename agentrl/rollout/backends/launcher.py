"""Start inference servers as child processes, wait until they generate, stop them.

    launcher = ServerLauncher("/models/Qwen2.5-7B-Instruct", num_servers=4, gpus_per_server=2,
                              server_args={"tp": 2, "mem_fraction_static": 0.7,
                                           "enable_memory_saver": True})
    urls = launcher.start()          # ["http://127.0.0.1:30000", ...] once /health_generate is 200
    ...
    launcher.stop()

Server i runs `COMMAND --model-path M --host H --port P [--key value ...]` where COMMAND
defaults to `python -m sglang.launch_server` and `server_args` become flags
(`mem_fraction_static=0.7` -> `--mem-fraction-static 0.7`, `True` -> a bare flag, `False`
and `None` -> omitted, a list -> the flag followed by its items). With `gpus_per_server` g,
server i gets the GPUs i*g .. (i+1)*g-1 of `gpus` through CUDA_VISIBLE_DEVICES: by default
the GPUs this process may use (its own CUDA_VISIBLE_DEVICES, e.g. the one GPU Ray gave a
trainer rank; 0, 1, ... when it is unset), never more than those. Any command that takes
these flags and serves `/health_generate` works: the tests start `agentrl serve` this way.

Each server is a new process group (SGLang forks scheduler processes), with its output in
`log_dir/server_<i>.log`; `stop` sends SIGTERM to the group, then SIGKILL after a grace
period. A server that exits while starting, or is not ready by the deadline, stops all of
them and raises `RuntimeError` with the end of its log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

logger = logging.getLogger(__name__)

SGLANG_COMMAND = (sys.executable, "-m", "sglang.launch_server")
SERVER_PYTHON_KEY = "actor_rollout_ref.rollout.server_python"
_LOG_TAIL_CHARS = 3000


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free now (the OS picks it)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct TCP ports that are free now. The sockets are held open together
    while the OS picks, so it cannot hand the same port out twice (picking them one at a
    time can: a closed socket's port is free again at once)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def visible_gpus() -> list[str] | None:
    """This process's CUDA_VISIBLE_DEVICES entries (indices or UUIDs); None when unset."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [g.strip() for g in value.split(",") if g.strip()]


def server_flags(server_args: dict[str, Any]) -> list[str]:
    """`{"mem_fraction_static": 0.7, "enable_memory_saver": True}` ->
    `["--mem-fraction-static", "0.7", "--enable-memory-saver"]`."""
    flags: list[str] = []
    for key, value in server_args.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            flags.append(flag)
        elif isinstance(value, (list, tuple)):
            flags += [flag, *map(str, value)]
        else:
            flags += [flag, str(value)]
    return flags


@dataclass
class ServerProcess:
    """One launched server."""

    url: str
    process: subprocess.Popen
    log_path: Path

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        except OSError:
            return ""


class ServerLauncher:
    """Launch `num_servers` servers of `model_path` (see the module docstring).

    Args:
        model_path: passed as `--model-path`.
        num_servers: how many servers.
        host: `--host`; the URLs use it too (127.0.0.1 when it is 0.0.0.0).
        ports: one port per server; None -> free ports picked by the OS.
        server_args: extra flags for every server.
        command: the program and its leading arguments, a list or a shell-like string;
            None -> `python -m sglang.launch_server`.
        gpus_per_server: > 0 sets CUDA_VISIBLE_DEVICES per server.
        gpus: the GPUs to share out, as CUDA_VISIBLE_DEVICES names them; None -> this
            process's CUDA_VISIBLE_DEVICES (0, 1, ... when unset).
        ready_timeout: seconds to wait for all servers to answer `/health_generate`.
        poll_interval: seconds between readiness polls.
        log_dir: where the server logs go; None -> a new temporary directory.
        env: extra environment variables for the servers.
        model_flag: the flag that names the model (`--model` for vLLM).
        health_path: the route that answers 200 once a server generates (`/health` for
            vLLM).
    """

    def __init__(
        self,
        model_path: str | os.PathLike,
        num_servers: int = 1,
        *,
        host: str = "127.0.0.1",
        ports: Sequence[int] | None = None,
        server_args: dict[str, Any] | None = None,
        command: Sequence[str] | str | None = None,
        gpus_per_server: int = 0,
        gpus: Sequence[str | int] | None = None,
        ready_timeout: float = 600.0,
        poll_interval: float = 2.0,
        log_dir: str | os.PathLike | None = None,
        env: dict[str, str] | None = None,
        model_flag: str = "--model-path",
        health_path: str = "/health_generate",
    ) -> None:
        if num_servers < 1:
            raise ValueError(f"num_servers must be >= 1, got {num_servers}")
        if ports is not None and len(ports) != num_servers:
            raise ValueError(f"{len(ports)} ports for {num_servers} servers")
        self.model_path = os.fspath(model_path)
        self.num_servers = num_servers
        self.host = host
        self.ports = list(ports) if ports is not None else None
        self.server_args = dict(server_args or {})
        if isinstance(command, str):
            command = shlex.split(command)
        self.command = list(command or SGLANG_COMMAND)
        self.gpus_per_server = gpus_per_server
        self.gpus = [str(g) for g in gpus] if gpus is not None else visible_gpus()
        needed = num_servers * gpus_per_server
        if gpus_per_server > 0 and self.gpus is not None and needed > len(self.gpus):
            source = "given" if gpus is not None else (
                f"visible to this process (CUDA_VISIBLE_DEVICES={','.join(self.gpus)})")
            raise ValueError(f"{num_servers} servers of {gpus_per_server} GPUs need {needed} "
                             f"GPUs, but {len(self.gpus)} are {source}")  # fmt: skip
        self.ready_timeout = ready_timeout
        self.poll_interval = poll_interval
        self.log_dir = (
            Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="agentrl-servers-"))
        )
        self.env = dict(env or {})
        self.model_flag = model_flag
        self.health_path = health_path
        self.servers: list[ServerProcess] = []
        self.remove_on_stop: list[Path] = []  # what the servers read, made for them alone
        # run on each server's URL once all are ready, before start() returns (a failure
        # stops the servers): e.g. vLLM's servers are told they serve policy version 0
        self.on_ready: list[Callable[[str], None]] = []

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def argv(self, port: int) -> list[str]:
        """The command line of the server on `port`."""
        return [
            *self.command,
            self.model_flag,
            self.model_path,
            "--host",
            self.host,
            "--port",
            str(port),
            *server_flags(self.server_args),
        ]

    def start(self) -> list[str]:
        """Start every server and wait until all generate; returns their URLs."""
        if self.servers:
            raise RuntimeError("servers already started; call stop() first")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        ports = self.ports or free_ports(self.num_servers, self._url_host())
        try:
            for i, port in enumerate(ports):
                self.servers.append(self._spawn(i, port))
            self._wait_ready()
            for hook in self.on_ready:
                for url in self.urls:
                    hook(url)
        except BaseException:
            self.stop()
            raise
        logger.info("%d servers ready: %s", len(self.servers), self.urls)
        return self.urls

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every server's process group, SIGKILL what is left after `grace` s."""
        for server in self.servers:
            _signal_group(server.process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for server in self.servers:
            try:
                server.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("server %s ignored SIGTERM; killing it", server.url)
            _signal_group(server.process, signal.SIGKILL)  # children left behind, if any
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.process.wait(timeout=5)
        self.servers = []
        for path in self.remove_on_stop:
            shutil.rmtree(path, ignore_errors=True)
        self.remove_on_stop = []

    def __enter__(self) -> ServerLauncher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _url_host(self) -> str:
        return "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host

    def _spawn(self, index: int, port: int) -> ServerProcess:
        # agentrl serve dies with this process (serve_cli.die_with_parent)
        env = {**os.environ, "AGENTRL_PARENT_PID": str(os.getpid()), **self.env}
        if self.gpus_per_server > 0:
            first = index * self.gpus_per_server
            gpus = self.gpus
            if gpus is None:  # every GPU of the machine is visible: count from 0
                gpus = [str(g) for g in range(first + self.gpus_per_server)]
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[first : first + self.gpus_per_server])
        log_path = self.log_dir / f"server_{index}.log"
        argv = self.argv(port)
        logger.info("starting server %d: %s (log %s)", index, shlex.join(argv), log_path)
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        return ServerProcess(f"http://{self._url_host()}:{port}", process, log_path)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        pending = list(self.servers)
        with httpx.Client(timeout=min(30.0, self.ready_timeout)) as client:
            while pending:
                for server in list(pending):
                    code = server.process.poll()
                    if code is not None:
                        raise RuntimeError(
                            f"server {server.url} exited with code {code} while "
                            f"starting; log {server.log_path}:\n"
                            f"{server.log_tail()}"
                        )
                    if _ready(client, server.url + self.health_path):
                        pending.remove(server)
                if not pending:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"servers not ready after {self.ready_timeout:.0f}s "
                        "(actor_rollout_ref.rollout.launch_timeout): "
                        f"{[s.url for s in pending]}; log of the first:\n"
                        f"{pending[0].log_tail()}"
                    )
                time.sleep(self.poll_interval)


def _ready(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def server_python(rollout: Mapping[str, Any]) -> str:
    """The interpreter servers run under: ``rollout.server_python`` (checked to exist and
    run), or this process's."""
    python = rollout.get("server_python")
    if not python:
        return sys.executable
    found = shutil.which(str(python))
    if found is None or not os.access(found, os.X_OK):
        raise ValueError(f"{SERVER_PYTHON_KEY}={python!r} is not an interpreter that can be "
                         "run (no such executable file)")
    return found


def gpu_server_launcher(
    rollout: Mapping[str, Any], model_path: str, module_args: Sequence[str],
    server_args: dict[str, Any], *, env: dict[str, str] | None = None,
    host: str = "127.0.0.1", gpus: Sequence[str] | None = None,
    model_flag: str = "--model-path", health_path: str = "/health_generate",
) -> ServerLauncher:  # fmt: skip
    """A launcher of an engine's GPU servers from ``rollout`` (``actor_rollout_ref.rollout``):
    ``launch_command`` or ``server_python module_args``; ``tensor_model_parallel_size`` GPUs
    each out of ``gpus`` (None: the ones this process sees); ``num_servers`` null -> as many
    as they hold (1 without GPUs); ``engine_kwargs`` added to ``server_args`` as flags."""
    import torch

    tp = int(rollout["tensor_model_parallel_size"])
    if gpus is None and torch.cuda.is_available():  # the GPUs this process sees
        gpus = (visible_gpus() or [str(i) for i in range(torch.cuda.device_count())])[
            : torch.cuda.device_count()
        ]
    num_servers = rollout["num_servers"]
    if num_servers is None:
        num_servers = max(1, len(gpus) // tp) if gpus else 1
    command = rollout["launch_command"] or (server_python(rollout), *module_args)
    return ServerLauncher(
        model_path, int(num_servers),
        server_args={**server_args, **(rollout["engine_kwargs"] or {})},
        command=command, gpus_per_server=tp if gpus else 0, gpus=gpus,
        ready_timeout=rollout["launch_timeout"], env=env, host=host,
        model_flag=model_flag, health_path=health_path,
    )  # fmt: skip


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    """Signal the server's process group (it leads its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


__all__ = [
    "SGLANG_COMMAND",
    "ServerLauncher",
    "ServerProcess",
    "free_port",
    "gpu_server_launcher",
    "server_python",
    "free_ports",
    "server_flags",
    "visible_gpus",
]
