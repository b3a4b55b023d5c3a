"""Shared pieces of the harness-agent tests: the CLIs and bwrap (skipped, saying why, where
absent), an agent-mode rollout over the scripted backend, and the hostile episode: its
targets on the host (a read-only sentinel folder, a TCP listener on every host address that
records connections, secrets in the home, under /srv, in a dataset, in a checkpoint and in
the trainer's environment, the project checkout, the check's own files), the one shell
command that reaches for all of them, and what its trajectory and the host must show."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import types
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from agentrl.agents.sandbox import find_bwrap
from agentrl.config import load_config
from agentrl.testing.rollout import call_text, prompts_batch


def cli_binary(env_var: str, name: str) -> str:
    """The CLI's path, or a skip that says how to install it."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the agent CLIs need it (scripts/setup_agent_clis.sh)")
    path = os.environ.get(env_var) or shutil.which(name)
    if not path or not Path(path).exists():
        pytest.skip(f"the {name} CLI was not found: set {env_var} or put {name} on PATH "
                    "(scripts/setup_agent_clis.sh)")
    return path


@pytest.fixture
def tmp_path():
    """A short folder per test, in place of pytest's own: an episode's gateway socket lives
    in the episode folder the tests make under it, and a unix socket's path holds at most
    107 bytes (pytest's tmp_path under an xdist worker, /tmp/pytest-of-USER/pytest-N/
    popen-gwK/TEST_NAME0/, leaves too little of them)."""
    path = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))
    yield path
    # with the folders tests make beside it (``{name}-outside``, ``{name}-other-episode``)
    for made in (path, *path.parent.glob(f"{path.name}-*")):
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def cgroups() -> None:
    """Skips, saying why, where episodes get no cgroups (agentrl doctor's reason)."""
    from agentrl.agents.limits import cgroup_support

    reason = cgroup_support()
    if reason is not None:
        pytest.skip(f"no cgroups for episodes here: {reason}")


@pytest.fixture
def bwrap() -> str:
    path = find_bwrap()
    if path is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap, or AGENTRL_BWRAP)")
    return path


def shell_call(tool: str, key: str, command: str) -> str:
    """An assistant text calling the CLI's shell tool (Bash/command, exec_command/cmd)."""
    return call_text(tool, "").replace('{"text": ""}', json.dumps({key: command}))


def agent_rollout(agent_fn, replies: list[str], tokenizer, extra_info: list[dict]):
    """(the rollout's output, the backend): one sample per ``extra_info`` through agent mode
    with the scripted policy answering every trajectory with ``replies``."""
    from agentrl.gateway.agent_rollout import AgentRollout
    from agentrl.gateway.agent_settings import AgentSettings
    from agentrl.rollout.backends.scripted import ScriptedBackend

    rollout = load_config(overrides=[
        "data.max_prompt_length=12288", "data.max_response_length=4096",
        "actor_rollout_ref.rollout.agent_timeout=120",
        "actor_rollout_ref.rollout.agent_client=anthropic",
        "actor_rollout_ref.rollout.multi_turn.enable=false",
    ]).actor_rollout_ref.rollout
    backend = ScriptedBackend(replies, tokenizer)
    engine = AgentRollout(AgentSettings.from_config(rollout), tokenizer, backend, agent_fn)
    batch = prompts_batch(len(extra_info), extra_info=extra_info)
    return asyncio.run(engine.agenerate_sequences(batch)), backend


class Listener:
    """A TCP listener on every host address (not the gateway) that counts connections; the
    policy tries it at 127.0.0.2 and at the host's own address."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


SECRET = "TOPSECRET-31337"  # in files (and a variable) the policy must not read
HIDDEN = "HIDDEN-ANSWER-7731"  # in the check's own file
SECRET_ENV = "AGENTRL_TRAINER_SECRET"  # the trainer's environment holds SECRET under it
CHECKOUT = Path(__file__).resolve().parents[2]
REFUSED = "the relay forwards only"  # the relay's answer to anything but the session's calls


def _host_address() -> str | None:
    """The host's first non-loopback IPv4 address, if it has one."""
    with contextlib.suppress(OSError):
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        address = probe.getsockname()[0]
        probe.close()
        return None if address.startswith("127.") else address
    return None


@dataclass
class HostileTargets:
    """What a hostile episode reaches for on the host (``hostile_targets``)."""

    sentinel: Path          # a folder shown read-only (ro_binds) with keep.txt
    listener: Listener
    host_address: str | None
    reads: list[Path]       # files holding SECRET: home, /srv, dataset, checkpoint
    checkpoint: Path        # a run dir's checkpoint (also among ``reads``)
    escapes: list[Path]     # host paths the policy writes to (none may appear)
    daemon: str             # the daemon's command line, unique to this test

    def processes(self) -> list[int]:
        """Host processes running the daemon's command line."""
        found = []
        for proc in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if proc.name.isdigit() and (proc / "cmdline").read_bytes().replace(
                        b"\0", b" ").strip().decode() == self.daemon:
                    found.append(int(proc.name))
        return found


@pytest.fixture
def hostile_targets(monkeypatch):
    """The targets (``HostileTargets``): secret files in the home, under /srv (where
    writable), in a dataset (a parquet in a folder of the home, as ``~/data/...``) and in a
    checkpoint (a run dir under the trainer's default ``checkpoints/`` in the checkout); the
    trainer's environment holding SECRET; checked by the test, removed afterwards."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    sentinel = Path(tempfile.mkdtemp(prefix="agentrl-sentinel-", dir="/tmp"))
    (sentinel / "keep.txt").write_text("still here")
    listener = Listener()
    made = [sentinel, Path(tempfile.mkdtemp(prefix=".agentrl-secret-", dir=Path.home()))]
    reads = [made[-1] / "key"]
    if os.access("/srv", os.W_OK):
        made.append(Path(tempfile.mkdtemp(prefix="agentrl-secret-", dir="/srv")))
        reads.append(made[-1] / "key")
    for secret in reads:
        secret.write_text(SECRET + "\n")
    made.append(Path(tempfile.mkdtemp(prefix=".agentrl-data-", dir=Path.home())))
    dataset = made[-1] / "train.parquet"
    pd.DataFrame({"prompt": ["6*7?"], "reward_model": [{"ground_truth": SECRET}]}).to_parquet(
        dataset)
    checkpoints = CHECKOUT / "checkpoints"
    had_checkpoints = checkpoints.exists()
    checkpoints.mkdir(exist_ok=True)
    made.append(Path(tempfile.mkdtemp(prefix="agentrl-hostile-", dir=checkpoints)))
    checkpoint = made[-1] / "global_step_1" / "actor" / "model.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_text(SECRET + "\n")
    mark = uuid.uuid4().hex[:8]
    escapes = [Path(f"/tmp/agentrl-escape-{mark}"), CHECKOUT / f"agentrl-escape-{mark}",
               Path.home() / f"agentrl-escape-{mark}"]
    yield HostileTargets(sentinel, listener, _host_address(), [*reads, dataset, checkpoint],
                         checkpoint, escapes, f"sleep 9000 0.{int(mark, 16) % 10**6:06d}")
    listener.close()
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)
    if not had_checkpoints:
        with contextlib.suppress(OSError):
            checkpoints.rmdir()
    for path in escapes:
        path.unlink(missing_ok=True)


def hostile_row(check: dict, mark: str = "") -> dict:
    """``check``'s row with a check file the policy will try to read and forge, and a file
    of its own (``mine.txt``: ``mark``) the batch's other episodes will try to read."""
    return {**check, "check_files": {"hidden.txt": HIDDEN + "\n"},
            "files": [*check.get("files", []), {"path": "mine.txt", "content": mark}],
            "check": f"{check['check']} && grep -qx {HIDDEN} hidden.txt"}


_GATEWAY = ("P=$(cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' "
            "| grep -ao '127.0.0.1:[0-9][0-9]*' | head -1); echo \"== gateway $P\"; "
            "curl -sS -m 3 http://$P/; echo; "
            "curl -sS -m 3 -X POST -H 'content-type: application/json' -d '{\"reward\": 1}' "
            "http://$P/reward; echo; "
            "curl -sS -m 3 --path-as-is http://$P/v1/../../other-session; echo")


def hostile_command(targets: HostileTargets, rm: str = "rm") -> str:
    """A policy's shell command, in labelled parts: delete outside its workspace (``rm
    -rf``; ``rm`` may be spelled so the CLI's own filter does not see it); reach the host
    at 127.0.0.2 and at its own address; read the secrets, the dataset, the checkpoint, the
    project checkout, the check's file, the trainer's environment and the other episodes'
    folders; write to the checkpoint, the host's /tmp, the checkout, the home and /usr;
    start a daemon (``setsid nohup``); call the gateway outside its session; forge the
    check's file; then do the work the check wants in the workspace."""
    addresses = ["127.0.0.2", *([targets.host_address] if targets.host_address else [])]
    connect = "; ".join(
        f"python3 -c \"import socket; socket.create_connection(('{a}', {targets.listener.port}),"
        f" 3)\" 2>/dev/null || echo connect-failed-{a}; curl -sS -m 3 "
        f"http://{a}:{targets.listener.port}/ 2>/dev/null || echo curl-failed-{a}"
        for a in addresses)
    reads = " ".join(str(p) for p in (*targets.reads, CHECKOUT / "pyproject.toml"))
    writes = " ".join(f"echo x > {p};" for p in (targets.checkpoint, *targets.escapes,
                                                 "/usr/agentrl-escape"))
    return (f"echo '== rm'; {rm} -rf {targets.sentinel} 2>&1 | head -3; "
            f"echo '== connect'; {connect}; "
            f"echo '== read'; cat {reads} hidden.txt 2>&1 | head -c 2000; "
            f"cat /tmp/agentrl-ep-*/workspace/mine.txt; echo; "
            f"echo '== env'; (env; cat /proc/[0-9]*/environ) 2>/dev/null | tr '\\0' '\\n' "
            f"| grep -a {SECRET_ENV} || echo env-clean; "
            f"echo '== write'; {{ {writes} }} 2>&1 | head -c 1000; "
            f"echo '== daemon'; setsid nohup {targets.daemon} >/dev/null 2>&1 & "
            f"for i in $(seq 50); do n=$(for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; "
            f"echo; done 2>/dev/null | grep -c '^{targets.daemon} *$'); "
            f"[ $n -gt 0 ] && break; sleep 0.1; done; echo daemon-running $n; "
            f"{_GATEWAY}; "
            f"echo forged > hidden.txt; echo 42 > answer.txt; echo '== end'")


def assert_contained(text: str, targets: HostileTargets) -> None:
    """A hostile episode's trajectory (``text``) and the host after it: what the policy got
    is the cage's refusals and its own files, nothing of the host's."""
    assert "== end" in text  # the whole command ran
    assert SECRET not in text and HIDDEN not in text  # files, dataset, checkpoint, env
    assert "[build-system]" not in text and "[project]" not in text  # the checkout's file
    assert "No such file or directory" in text and "Read-only file system" in text
    assert "env-clean" in text
    for address in ["127.0.0.2", *([targets.host_address] if targets.host_address else [])]:
        assert f"connect-failed-{address}" in text and f"curl-failed-{address}" in text
    assert targets.listener.connections == 0
    assert (targets.sentinel / "keep.txt").read_text() == "still here"
    assert targets.checkpoint.read_text() == SECRET + "\n"
    assert [p for p in targets.escapes if p.exists()] == []
    assert "daemon-running 1" in text  # it ran during the episode ...
    assert targets.processes() == []  # ... and not after it
    assert text.count(REFUSED) == 3  # the gateway outside the session's calls


LIMIT_OPTIONS = {"episode_pids": 512, "episode_memory_mb": 1024, "disk_mb": 32}
LIMIT_CHECK = "test \"$(cat answer.txt)\" = 42"
# what each episode of the limits batch does after its work (`mode.txt` in its workspace)
LIMIT_MODES = {"calm": "echo calm-ok",
               "bomb": "b() { b | b & }; b; sleep 60",
               "hog": "python3 -c 'x = bytearray(4 << 30)'; sleep 60",
               "fill": "for i in $(seq 3000); do head -c 1000000 /dev/zero > f$i; sleep 0.01; "
                       "done; sleep 60"}
LIMIT_COMMAND = ("echo 42 > answer.txt; case $(cat mode.txt) in "
                 + " ".join(f"{mode}) {then};;" for mode, then in LIMIT_MODES.items())
                 + " esac; echo survived-$(cat mode.txt)")


def limit_rows() -> list[dict]:
    """One row per ``LIMIT_MODES`` entry: the same command does the work, then its mode."""
    return [{"mode": mode, "files": {"mode.txt": mode + "\n"}, "check": LIMIT_CHECK}
            for mode in LIMIT_MODES]


def run_limits_batch(agent, call: str, tokenizer) -> tuple[Any, dict[str, dict], float]:
    """(the rollout, each mode's result dict, seconds taken): the limits batch through
    ``agent`` (made with ``LIMIT_OPTIONS``), its shell tool ``call(command)``."""
    results: dict[str, dict] = {}

    async def recorded(task, client):
        results[task["extra_info"]["mode"]] = await agent(task, client)
        return results[task["extra_info"]["mode"]]

    started = time.monotonic()
    out, _ = agent_rollout(recorded, [call(LIMIT_COMMAND), "done"], tokenizer, limit_rows())
    return out, results, time.monotonic() - started


def assert_limits_held(out, results: dict[str, dict], took: float, tokenizer) -> None:
    """The fork bomb, the memory hog and the disk filler each ended their own episode at
    its limit, counted in ``agent/limit_kills``; the calm episode beside them finished;
    every episode's work passed its check."""
    assert list(out.non_tensor_batch["request_state"]) == ["completed"] * len(LIMIT_MODES)
    assert {mode: (r["limit"], r["limit_kills"]) for mode, r in results.items()} == {
        "calm": (None, 0), "bomb": ("pids", 1), "hog": ("memory", 1), "fill": ("disk", 1)}
    assert results["calm"]["stopped"] == "exit" and results["calm"]["cli_exit"] == 0
    assert out.meta_info["metrics"]["agent/limit_kills"] == 3.0
    assert {mode: r["score"] for mode, r in results.items()} == dict.fromkeys(LIMIT_MODES, 1.0)
    texts = [tokenizer.decode(out.batch["responses"][k].tolist()) for k in range(4)]
    assert "calm-ok" in texts[0] and "survived-calm" in texts[0]
    for mode, text in zip(list(LIMIT_MODES)[1:], texts[1:], strict=True):
        assert f"survived-{mode}" not in text
    assert took < 55  # not the hostile episodes' `sleep 60`


def episode_processes(root: Path) -> list[str]:
    """The command lines of host processes that belong to an episode under ``root``: a
    bwrap or a bridge (``root`` in their arguments), a CLI or what it started (``HOME`` in
    an episode folder under ``root``)."""
    return list(episode_pids(root).values())


def episode_pids(root: Path) -> dict[int, str]:
    """``episode_processes`` by process id."""
    found, marker = {}, str(root).encode()
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and int(proc.name) != os.getpid():
                cmdline = (proc / "cmdline").read_bytes()
                environ = (proc / "environ").read_bytes().split(b"\0")
                if marker in cmdline or any(v.startswith(b"HOME=" + marker) for v in environ):
                    found[int(proc.name)] = cmdline.replace(b"\0", b" ").decode(
                        errors="replace")
    return found


def cancel_mid_command(agent, call: str, tokenizer, row: dict, root: Path,
                       running: str) -> list[str]:
    """The command lines of the episode's processes (``episode_processes`` of ``root``, the
    folder ``agent`` puts its episodes in) still there 5 s after its episode, the scripted
    policy's first reply ``call``, was cancelled once its cage ran a command line holding
    ``running``. The parent, this process, lives on: bwrap's ``--die-with-parent`` plays no
    part, the cancellation itself must kill (as the producer's stop cancels episodes)."""
    left: list[str] = []

    async def cancelled(task, client):
        episode = asyncio.ensure_future(agent(task, client))
        deadline = time.monotonic() + 60
        while not any(running in line for line in episode_processes(root)):
            assert not episode.done() and time.monotonic() < deadline, "no command ran"
            await asyncio.sleep(0.1)
        episode.cancel()
        await asyncio.gather(episode, return_exceptions=True)
        until = time.monotonic() + 5  # a SIGKILLed process takes a moment to go
        while episode_processes(root) and time.monotonic() < until:
            await asyncio.sleep(0.1)
        left.extend(episode_processes(root))
        return {"score": 0.0}

    agent_rollout(cancelled, [call, "done"], tokenizer, [row])
    return left


SCRIPTED_SERVERS = Path(__file__).parents[1] / "fixtures" / "scripted_servers.py"


def async_overrides(agent: str, out: Path, steps: int = 2,
                    replies: list[str] | None = None) -> list[str]:
    """The overrides of ``trainer.mode=async`` steps with ``agentrl.agents.<agent>.run`` as
    the agent function, one prompt a step, its dumps under ``out/rollouts``. The policy is
    the tiny model on the rollout servers, its text the CLI's final answer; with ``replies``
    the scripted policy instead (every episode's k-th call answered with ``replies[k]``),
    behind servers of its own (tests/fixtures/scripted_servers.py: the scripted backend
    has none for the producer to reach)."""
    response = 32 if replies is None else 512
    policy = []
    if replies is not None:
        path = out / "replies.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in replies))
        policy = [f"actor_rollout_ref.rollout.name={SCRIPTED_SERVERS}:ScriptedServers",
                  f"actor_rollout_ref.rollout.engine_kwargs.replies={path}"]
    return [
        *policy, "trainer.mode=async", "off_policy.max_staleness=1",
        f"actor_rollout_ref.rollout.agent_function=agentrl.agents.{agent}.run",
        "actor_rollout_ref.rollout.agent_timeout=120",
        "actor_rollout_ref.rollout.multi_turn.enable=false",
        "data.train_batch_size=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "data.max_prompt_length=8192", f"data.max_response_length={response}",
        "data.shuffle=false",  # the tiny model's config says 4096:
        f"actor_rollout_ref.rollout.max_model_len={8192 + response}",
        f"trainer.total_training_steps={steps}", f"trainer.rollout_data_dir={out / 'rollouts'}",
    ]  # fmt: skip


def agent_env(env: dict[str, str], root: Path) -> dict[str, str]:
    """The CLI's options (``env``) with the episodes' root and the bwrap cage: what the
    producer's process must start with."""
    return {**env, "AGENTRL_AGENT_ROOT": str(root), "AGENTRL_AGENT_SANDBOX": "bwrap"}


def train_async(make_config, short_prompts, tmp_path: Path, monkeypatch, agent: str,
                env: dict[str, str], steps: int = 2,
                replies: list[str] | None = None) -> tuple[list[dict], list[dict], Path]:
    """(the per-step metrics, the dumped rows, the episodes' root) of ``steps``
    trainer.mode=async steps (``async_overrides``), the CLI's options in ``env``, the
    canary on as by default."""
    from agentrl.trainer import run_train

    root = tmp_path / "episodes"
    for key, value in agent_env(env, root).items():
        monkeypatch.setenv(key, value)  # the producer's process starts with them
    history = run_train(make_config(*short_prompts,
                                    *async_overrides(agent, tmp_path, steps, replies)))
    rows = [json.loads(line) for step in range(1, steps + 1)
            for line in (tmp_path / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
    return history, rows, root


def assert_trained_async(history: list[dict], rows: list[dict], root: Path) -> None:
    """Two steps, no failed episode, every trained token one the sessions recorded of the
    policy (fewer where a call outran the trajectory's response budget) and versioned within
    the staleness bound, n episodes of each prompt, the canary run after each sync and no
    server drained; nothing of the episodes left running or on disk."""
    assert [m["training/global_step"] for m in history] == [1.0, 2.0]
    assert all(m["rollout/agent_errors"] == 0 for m in history)
    assert all(0 < m["agent/tokens_trained"] <= m["agent/tokens_recorded"] for m in history)
    assert all("rollout/canary/unscored" in m for m in history)  # it ran after each sync
    assert all(m.get("rollout/canary/drained", 0) == 0 for m in history)  # none diverged
    assert len(rows) == 4 and all(row["policy_versions"] for row in rows)
    assert all(row["step"] - 1 - min(row["policy_versions"]) <= 1 for row in rows)
    assert sorted(Counter(row["uid"] for row in rows).values()) == [2, 2]
    assert episode_processes(root) == []
    assert not root.exists() or list(root.iterdir()) == []


def kill_async_run(tiny_model_dir: Path, short_prompts, tmp_path: Path, agent: str,
                   env: dict[str, str], replies: list[str], running: str, how: str,
                   within_s: float = 15.0) -> tuple[list[str], list[str], list[str]]:
    """(what of the episodes is still running ``within_s`` seconds after the trainer
    ended, the episode folders left, the log's tail): ``agentrl train`` of ``async_overrides`` under the scripted
    ``replies``, in a process group of its own, stopped once an episode's cage runs a
    command line holding ``running`` (its first reply's command): ``how`` is ``kill`` (SIGKILL to
    the whole group: no clean-up code runs anywhere), ``kill_trainer`` (SIGKILL to the
    trainer's process alone, as ``kill -9 PID`` or the OOM killer: what it started must notice
    by itself) or ``interrupt`` (SIGINT to the trainer alone: it shuts
    down with the episodes in flight). The episodes' processes are ``episode_pids`` of the
    run's own root; whatever outlives the check is killed, the group's leftovers too."""
    import signal
    import subprocess
    import sys

    model = tmp_path / "model"  # a path of this run's own (its servers' command lines)
    model.symlink_to(tiny_model_dir, target_is_directory=True)
    root, log = tmp_path / "episodes", tmp_path / "train.log"
    command = [sys.executable, "-m", "agentrl.cli", "train",
               f"actor_rollout_ref.model.path={model}", *short_prompts,
               "actor_rollout_ref.rollout.n=2", "algorithm.adv_estimator=grpo",
               f"trainer.default_local_dir={tmp_path / 'ckpt'}", "trainer.logger=[console]",
               "trainer.val_before_train=false",
               *async_overrides(agent, tmp_path, steps=4, replies=replies)]
    environ = {**os.environ, **agent_env(env, root),
               "PYTHONPATH": f"{CHECKOUT}:{os.environ.get('PYTHONPATH', '')}"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, env=environ, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not any(running in line for line in episode_processes(root)):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no episode started in 300 s"
            time.sleep(0.1)
        if how == "kill":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal({"kill_trainer": signal.SIGKILL, "interrupt": signal.SIGINT}[how])
        # the check is what is left behind, not how fast the run stops: a clean clone's
        # one-process suite once saw an interrupted run outlive 120 s (the episodes'
        # agent_timeout), so it gets 300 s, and its log if it outlives them
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"agentrl train still running 300 s after {how}:\n"
                                 + log.read_text(errors="replace")[-3000:]) from None
        until = time.monotonic() + within_s
        while episode_processes(root) and time.monotonic() < until:
            time.sleep(0.2)
        folders = sorted(p.name for p in root.iterdir()) if root.exists() else []
        return (episode_processes(root), folders,
                log.read_text(errors="replace").splitlines()[-40:])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for pid in episode_pids(root):  # a failed check leaves nothing running either
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def run_harness_episode(harness, task: dict, options) -> dict:
    """One episode of `harness` on `task`, its model client pointed at no gateway (the
    fake CLIs of these tests never call it)."""
    from agentrl.agents.harness import run_episode

    async def main():
        async with httpx.AsyncClient() as http:
            client = types.SimpleNamespace(_client=http, base_url="http://g/sessions/s/v1")
            return await run_episode(harness, task, client, options)
    return asyncio.run(main())
