"""Two Ray nodes on one machine: a run's two ranks land on different nodes, a lost node ends
the run with an error that names it and its rank, and a resume on the restored cluster
continues with the next step.

The test starts its own cluster in a temp dir, with its own ports and token authentication
(Ray 2.60's `ray start --head` requires a token from every other client): `ray start
--head --block` for node_a and `ray start --address --block` for node_b, one CPU each, so
neither node can hold both ranks (`trainer.nnodes=2 trainer.n_gpus_per_node=1` on CPU:
one gloo rank per node, the rendezvous on rank 0's node). Training is `agentrl smoke` in a
subprocess with a deadline. Both nodes are stopped whatever happens: SIGTERM to each
`ray start --block` (which stops its node's processes), then SIGKILL to every process that
was in its tree. Ray's health checks are shortened (TwoNodeCluster), so that the lost node
is marked dead within seconds. Linux only (reads /proc). About a minute on 2 cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrl.rollout.backends.launcher import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]
pytest.importorskip("ray")

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
if RAY is None:
    pytest.skip("no `ray` command", allow_module_level=True)
DIST_TIMEOUT_S = 60  # trainer.dist_timeout of the runs: the lost node must end a run sooner
RUN_TIMEOUT_S = 240  # a run that takes longer has hung
RANK_NODES = re.compile(r"rank (\d+) on node ([0-9a-f]+)")
NODE_TABLE = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print("NODES", json.dumps({n["NodeID"]: {"name": n["NodeName"], "alive": n["Alive"],
                                        "address": n["NodeManagerAddress"]} for n in ray.nodes()}))
"""


def _wait_for(condition, timeout_s: float, what: str, interval_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(interval_s)


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (tells a pid from a reused one); None when
    it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _process_tree(root: int) -> list[tuple[int, int]]:
    """(pid, start time) of ``root`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children[int(stat.rsplit(")", 1)[1].split()[1])].append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        started = _start_time(pid)
        if started is not None:
            tree.append((pid, started))
            todo.extend(children[pid])
    return tree


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _kill(processes: list[tuple[int, int]]) -> None:
    """SIGKILL each process that is still the one recorded (same start time)."""
    for pid, started in processes:
        if _start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class TwoNodeCluster:
    """node_a (head) and node_b on this machine, each `ray start --block` a process we own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.gcs_port = free_port("")
        self.address = f"127.0.0.1:{self.gcs_port}"
        # only for the subprocesses: the token the nodes and the drivers share
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
        # the GCS marks a node whose raylet is gone dead after 3 failed health checks 1 s
        # apart (Ray's default: 5, 3 s apart), so the resume need not wait 15 s for it; a
        # slow but live raylet still has each check's 10 s to answer
        self.env |= {"RAY_health_check_period_ms": "1000",
                     "RAY_health_check_failure_threshold": "3"}
        self.nodes: dict[str, subprocess.Popen] = {}

    def start_node(self, name: str) -> None:
        """`ray start --block` of ``name`` (node_a is the head), one CPU and a custom
        resource of its name; returns once the node has joined."""
        head = name == "node_a"
        role = (["--head", "--port", str(self.gcs_port), "--include-dashboard", "false",
                 "--dashboard-port", str(free_port(""))]
                if head else ["--address", self.address])  # fmt: skip
        log = self.root / f"{name}.log"
        with log.open("w") as out:
            self.nodes[name] = subprocess.Popen(
                [RAY, "start", "--block", *role, "--node-name", name, "--num-cpus", "1",
                 "--resources", json.dumps({name: 1}), "--temp-dir", str(self.root / name),
                 "--object-store-memory", str(100 * 2**20), "--disable-usage-stats",
                 "--dashboard-agent-listen-port", str(free_port(""))],
                env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        process = self.nodes[name]

        def started() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"ray start of {name} exited:\n{log.read_text()}")
            return "Ray runtime started" in log.read_text()

        _wait_for(started, 120, f"the start of {name}", interval_s=0.2)

    def kill_node(self, name: str) -> None:
        """A machine loss: SIGKILL the node's raylet, then its workers and agents (its
        children); `ray start --block` then stops what is left and exits."""
        tree = _process_tree(self.nodes[name].pid)
        raylets = [pid for pid, _ in tree if _command_name(pid) == "raylet"]
        assert len(raylets) == 1, f"{name}: expected one raylet in {tree}"
        _kill(_process_tree(raylets[0]))  # the raylet first, then its children
        self.nodes[name].wait(timeout=60)

    def node_table(self) -> dict[str, dict]:
        """Ray's node table (GCS) as a driver sees it: node id -> name, alive, address."""
        out = subprocess.run([sys.executable, "-c", NODE_TABLE, self.address], env=self.env,
                             capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
        line = next(line for line in out.stdout.splitlines() if line.startswith("NODES "))
        return json.loads(line.removeprefix("NODES "))

    def stop(self) -> None:
        """Stop both nodes, gracefully first, then whatever is left of their trees."""
        trees = {name: _process_tree(p.pid) for name, p in self.nodes.items()}
        for name in sorted(self.nodes, reverse=True):  # node_b, then the head
            if self.nodes[name].poll() is None:
                self.nodes[name].send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in self.nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
        for tree in trees.values():
            _kill(tree)


@pytest.fixture
def cluster() -> Iterator[TwoNodeCluster]:
    root = Path(tempfile.mkdtemp(prefix="ray2n", dir="/tmp"))  # short: Ray's socket paths
    cluster = TwoNodeCluster(root)
    try:
        cluster.start_node("node_a")
        cluster.start_node("node_b")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


class Run:
    """`agentrl smoke` on the cluster, in its own session, killed with it on a timeout."""

    def __init__(self, cluster: TwoNodeCluster, out_dir: Path, log: Path, steps: int,
                 *overrides: str) -> None:  # fmt: skip
        self.log = log
        argv = [sys.executable, "-m", "agentrl.smoke", "--out-dir", str(out_dir),
                "--steps", str(steps), "trainer.nnodes=2", "trainer.n_gpus_per_node=1",
                "trainer.worker_group=ray", f"ray_init.address={cluster.address}",
                "trainer.save_freq=1", f"trainer.dist_timeout={DIST_TIMEOUT_S}", *overrides]  # fmt: skip
        with log.open("w") as out:
            self.process = subprocess.Popen(argv, cwd=out_dir.parent, env=cluster.env, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the run hung for {timeout_s:.0f} s:\n{self.text()[-5000:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def rank_nodes(self) -> dict[int, str]:
        """Rank -> node id, from the worker group's start-up line."""
        line = next(line for line in self.text().splitlines() if " ranks up " in line)
        return {int(rank): node for rank, node in RANK_NODES.findall(line)}


def _steps(out_dir: Path) -> list[int]:
    rows = (out_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(row)["step"] for row in rows]


def test_ranks_on_two_nodes_a_lost_node_named_and_a_resume(cluster: TwoNodeCluster, tmp_path: Path):
    out = tmp_path / "run"
    out.mkdir()
    run = Run(cluster, out, tmp_path / "first.log", 50)  # never finishes: node_b is lost
    try:
        _wait_for(lambda: (out / "global_step_1").is_dir() or run.process.poll() is not None,
                  RUN_TIMEOUT_S, "the first checkpoint")  # fmt: skip
        assert run.process.poll() is None, run.text()[-5000:]
        lost_at = time.monotonic()
        cluster.kill_node("node_b")  # during step 2 (a step takes seconds)
        code = run.wait(DIST_TIMEOUT_S + 60)
        ended_after = time.monotonic() - lost_at
    finally:
        run.kill()
    text = run.text()
    nodes = cluster.node_table()
    by_name = {info["name"]: node for node, info in nodes.items()}
    node_a, lost_b = by_name["node_a"], by_name["node_b"]

    # the two ranks ran on the two nodes (Ray picks which), the rendezvous on rank 0's
    ranks = run.rank_nodes()
    assert sorted(ranks) == [0, 1] and set(ranks.values()) == {node_a, lost_b}
    lost_rank = next(rank for rank, node in ranks.items() if node == lost_b)
    assert f"process group at {nodes[ranks[0]]['address']}:" in text

    # the run ended, within the collective timeout, with an error naming node and rank
    assert code != 0 and ended_after < DIST_TIMEOUT_S, (code, ended_after)
    error = [
        line
        for line in text.splitlines()
        if line.startswith("agentrl.distributed.worker.WorkerError")
    ]
    assert error, text[-5000:]
    assert f"; rank {lost_rank}: node {lost_b} (node_b, " in error[-1], error[-1]
    assert " is lost: " in error[-1]
    assert "RuntimeError: cannot call" not in text  # the cleanup leaves the broken group be

    # a resume on the restored cluster continues with the next step, on two nodes again
    saved = int((out / "latest_checkpointed_iteration.txt").read_text())
    assert saved >= 1
    _wait_for(lambda: not cluster.node_table()[lost_b]["alive"], 90,
              "Ray marking the lost node dead", interval_s=1)  # fmt: skip
    cluster.start_node("node_b")
    resumed = Run(cluster, out, tmp_path / "resumed.log", saved + 1, "trainer.resume_mode=auto")
    try:
        assert resumed.wait(RUN_TIMEOUT_S) == 0, resumed.text()[-5000:]
    finally:
        resumed.kill()
    assert f"at global step {saved}" in resumed.text()
    assert _steps(out) == list(range(1, saved + 2))
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == str(saved + 1)
    nodes = cluster.node_table()
    new_b = next(node for node, info in nodes.items() if info["name"] == "node_b" and info["alive"])
    ranks = resumed.rank_nodes()
    assert sorted(ranks) == [0, 1] and set(ranks.values()) == {node_a, new_b} and new_b != lost_b
