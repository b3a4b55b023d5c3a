"""Tests for agentrl/rollout/backends/launcher.py: it starts real `agentrl serve` processes
through the same code path that starts `sglang.launch_server` on GPUs."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.launcher import (
    SGLANG_COMMAND,
    ServerLauncher,
    free_ports,
    server_flags,
    visible_gpus,
)
from agentrl.rollout.backends.sglang import SGLangBackend

SERVE = [sys.executable, "-m", "agentrl.rollout.backends.serve_cli"]


def test_server_flags():
    assert server_flags(
        {
            "tp": 2,
            "mem_fraction_static": 0.7,
            "enable_memory_saver": True,
            "dtype": None,
            "skip_server_warmup": False,
            "cuda_graph_bs": [1, 2],
        }
    ) == [
        "--tp",
        "2",
        "--mem-fraction-static",
        "0.7",
        "--enable-memory-saver",
        "--cuda-graph-bs",
        "1",
        "2",
    ]


def test_argv_defaults_to_sglang_and_takes_a_command_string(tmp_path):
    launcher = ServerLauncher(
        "/m", 2, host="0.0.0.0", ports=[30000, 30001], server_args={"tp": 1}, log_dir=tmp_path
    )
    assert launcher.argv(30000) == [
        *SGLANG_COMMAND,
        "--model-path",
        "/m",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--tp",
        "1",
    ]
    custom = ServerLauncher("/m", command="agentrl serve --seed 3", log_dir=tmp_path)
    assert custom.argv(1)[:4] == ["agentrl", "serve", "--seed", "3"]
    with pytest.raises(ValueError, match="2 ports for 1 servers"):
        ServerLauncher("/m", 1, ports=[1, 2])
    with pytest.raises(ValueError, match="num_servers must be >= 1"):
        ServerLauncher("/m", 0)


def test_launches_agentrl_serve_processes_that_generate(tiny_model_dir, prompts, tmp_path):
    launcher = ServerLauncher(
        tiny_model_dir,
        2,
        command=SERVE,
        server_args={"max_num_seqs": 4},
        ready_timeout=120,
        poll_interval=0.2,
        log_dir=tmp_path,
    )
    local = HFBackend.from_pretrained(tiny_model_dir)
    params = {"temperature": 0, "max_new_tokens": 8}
    with launcher:
        assert len(launcher.urls) == 2 and len(set(launcher.urls)) == 2
        client = SGLangBackend(launcher.urls, request_timeout=60)

        async def both():
            outs = await asyncio.gather(
                *(client.generate(p, params, f"r{i}") for i, p in enumerate(prompts))
            )
            info = await client.get_model_info(launcher.urls[1])
            await client.aclose()
            return outs, info

        outs, info = asyncio.run(both())
        processes = [s.process for s in launcher.servers]
    assert info["model_path"] == str(tiny_model_dir)
    expected = [asyncio.run(local.generate(p, params, "x")).output_ids for p in prompts]
    assert [o.output_ids for o in outs] == expected
    assert all(p.poll() is not None for p in processes)  # stopped
    assert launcher.servers == []
    assert "serving" in (tmp_path / "server_1.log").read_text()


def test_a_server_that_exits_while_starting_is_reported_with_its_log(tmp_path):
    command = [sys.executable, "-c", "import sys; print('unknown flag --tp'); sys.exit(3)"]
    launcher = ServerLauncher("/m", command=command, poll_interval=0.05, log_dir=tmp_path)
    with pytest.raises(RuntimeError, match="exited with code 3(.|\n)*unknown flag --tp"):
        launcher.start()
    assert launcher.servers == []


def test_a_server_that_never_gets_ready_is_stopped_at_the_deadline(tmp_path):
    code = "import os, time; print('loading', os.getpid(), flush=True); time.sleep(60)"
    launcher = ServerLauncher(
        "/m",
        command=[sys.executable, "-c", code],
        ready_timeout=1.0,
        poll_interval=0.1,
        log_dir=tmp_path,
    )
    with pytest.raises(RuntimeError, match="not ready after 1s(.|\n)*loading"):
        launcher.start()
    pid = int((tmp_path / "server_0.log").read_text().split()[1])
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not left behind
        os.kill(pid, 0)


def test_free_ports_are_distinct():
    for _ in range(20):
        ports = free_ports(8)
        assert len(set(ports)) == 8


# A server that says which GPUs it was given and answers every GET with 200.
GPU_REPORTER = [sys.executable, "-c", """
import http.server, os, sys
print("gpus", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
port = int(sys.argv[sys.argv.index("--port") + 1])
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""]


def _gpus_of_servers(tmp_path, num_servers: int, **kwargs) -> list[str]:
    launcher = ServerLauncher("/m", num_servers, command=GPU_REPORTER, ready_timeout=30,
                              poll_interval=0.05, log_dir=tmp_path, **kwargs)  # fmt: skip
    with launcher:
        pass
    return [(tmp_path / f"server_{i}.log").read_text().split()[1] for i in range(num_servers)]


@pytest.mark.parametrize(
    ("visible", "num_servers", "per_server", "expected"),
    [
        ("5", 1, 1, ["5"]),  # a Ray rank's one GPU: its server goes there, not to GPU 0
        ("2,3,6,7", 2, 2, ["2,3", "6,7"]),
        ("GPU-aa,GPU-bb", 2, 1, ["GPU-aa", "GPU-bb"]),  # UUIDs pass through
        (None, 2, 2, ["0,1", "2,3"]),  # every GPU visible: counted from 0
    ],
)
def test_servers_get_the_gpus_this_process_may_use(
    tmp_path, monkeypatch, visible, num_servers, per_server, expected
):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert _gpus_of_servers(tmp_path, num_servers, gpus_per_server=per_server) == expected


def test_given_gpus_win_over_the_visible_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert _gpus_of_servers(tmp_path, 1, gpus_per_server=2, gpus=["4", "5"]) == ["4,5"]


def test_more_gpus_than_visible_is_an_error(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert visible_gpus() == ["5"]
    with pytest.raises(ValueError, match="1 servers of 2 GPUs need 2 GPUs, but 1 are visible "
                                         "to this process \\(CUDA_VISIBLE_DEVICES=5\\)"):
        ServerLauncher("/m", 1, gpus_per_server=2)
    with pytest.raises(ValueError, match="need 4 GPUs, but 2 are given"):
        ServerLauncher("/m", 2, gpus_per_server=2, gpus=["0", "1"])


# A stand-in server: answers 200 to every GET on the --port it is given.
OK_SERVER = """
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Ok).serve_forever()
"""


def test_ready_hooks_run_on_every_url_and_a_failing_one_stops_the_servers(tmp_path):
    seen: list[str] = []
    launcher = ServerLauncher("/m", 2, command=[sys.executable, "-c", OK_SERVER],
                              poll_interval=0.05, log_dir=tmp_path)  # fmt: skip
    launcher.on_ready.append(seen.append)
    with launcher:
        assert seen == launcher.urls and len(seen) == 2
    assert launcher.servers == []

    def refuse(url: str) -> None:
        raise RuntimeError(f"{url} would not take its version")

    failing = ServerLauncher("/m", 1, command=[sys.executable, "-c", OK_SERVER],
                             poll_interval=0.05, log_dir=tmp_path / "second")  # fmt: skip
    failing.on_ready.append(refuse)
    with pytest.raises(RuntimeError, match="would not take its version"):
        failing.start()
    assert failing.servers == []  # stopped, not left running
