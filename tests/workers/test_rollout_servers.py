"""agentrl/workers/rollout_servers.py: the servers trainer ranks launch, on which GPUs, and
which rank writes the weights and tells which servers to load them.

Two gloo ranks on this machine stand for the ranks of one GPU node: each "GPU" is a name in
CUDA_VISIBLE_DEVICES (what Ray gives a rank), the servers are real `agentrl serve` processes
started through a wrapper that records the CUDA_VISIBLE_DEVICES it got and the rank that
started it, and the weights are synced into them through /update_weights_from_disk. The four
runs (marked slow) are made by one pair of rank processes that the module starts once
(`ranks`) and that run each test's run when it asks: one start-up of the ranks instead of one
per test. The placement rules are also tested alone.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from agentrl.workers import rollout_servers
from agentrl.workers.rollout_servers import RankPlace, plan_disk_sync, rank_gpus, server_groups

# `agentrl serve`, recording "CUDA_VISIBLE_DEVICES parent-pid" first
WRAPPER = """#!/bin/sh
echo "${{CUDA_VISIBLE_DEVICES:-none}} $AGENTRL_PARENT_PID" >> {log}
exec {python} -m agentrl.rollout.backends.serve_cli "$@"
"""

# one rank: a run (agentrl.testing.workers.launched_servers_rank) for each line read, until
# stdin closes; the rank's GPUs and file visibility as they were before each run (a run may
# stand in for them)
RANK = """
import json, sys
from agentrl.testing.workers import launched_servers_rank
from agentrl.workers import rollout_servers
rank, model_dir = int(sys.argv[1]), sys.argv[2]
own = rollout_servers.rank_gpus, rollout_servers._sees
while line := sys.stdin.readline():
    run = json.loads(line)
    try:
        launched_servers_rank(rank, 2, run["store"], model_dir, run["dir"], run["overrides"],
                              run["fake_gpus"], run["blind"])
    finally:
        rollout_servers.rank_gpus, rollout_servers._sees = own
"""
RUN_TIMEOUT_S = 300


class Ranks:
    """Two rank processes that make one run per `run` call. A rank that fails ends the
    other, as torch.multiprocessing.spawn would, and fails this and every later run with
    the ranks' stderr."""

    def __init__(self, root: Path, model_dir: Path) -> None:
        self.root, self.broken = root, ""
        self.logs = [root / f"rank{r}.stderr" for r in range(2)]
        self.procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), str(model_dir)],
                                       stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=self.logs[r].open("w"), text=True)
                      for r in range(2)]  # fmt: skip

    def run(self, name: str, overrides: list[str], fake_gpus: list[str] | None = None,
            blind: bool = False) -> tuple[Path, list[dict]]:  # fmt: skip
        """Run `name` with these config overrides, the GPUs its ranks stand for and whether
        rank 1 is blind to files rank 0 writes; its directory and the two ranks' results."""
        if self.broken:
            pytest.fail(self.broken)
        directory = self.root / name
        directory.mkdir()
        wrapper = directory / "serve.sh"
        wrapper.write_text(WRAPPER.format(log=directory / "servers.log", python=sys.executable))
        run = {"dir": str(directory), "store": str(directory / "store"), "fake_gpus": fake_gpus,
               "blind": blind, "overrides": [
                   "data.max_prompt_length=16",
                   "data.max_response_length=8",
                   "actor_rollout_ref.rollout.name=sglang",
                   f"actor_rollout_ref.rollout.launch_command='sh {wrapper}'",
                   "actor_rollout_ref.rollout.launch_timeout=120",
                   "actor_rollout_ref.rollout.request_timeout=60",
                   "trainer.n_gpus_per_node=2",
                   *overrides]}  # fmt: skip
        files = [directory / f"rank{r}.json" for r in range(2)]
        deadline = time.monotonic() + RUN_TIMEOUT_S
        with contextlib.suppress(BrokenPipeError):  # a rank died: below
            for proc in self.procs:
                proc.stdin.write(json.dumps(run) + "\n")
                proc.stdin.flush()
            while not all(f.is_file() for f in files):  # each rank writes its file last
                if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        results = [json.loads(f.read_text()) if f.is_file() else {} for f in files]
        if not all(results):  # a rank that raises still writes its file, empty
            self.close()
            self.broken = f"the {name} run did not finish; rank stderr: " + repr(
                [log.read_text()[-3000:] for log in self.logs])
            pytest.fail(self.broken)
        return directory, results

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(BrokenPipeError):
                    proc.stdin.close()  # the rank's loop ends
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def ranks(tiny_model_dir, tmp_path_factory):
    ranks = Ranks(tmp_path_factory.mktemp("rollout_servers"), tiny_model_dir)
    yield ranks
    ranks.close()


def _servers(directory: Path) -> list[str]:
    """What each server was started with: its CUDA_VISIBLE_DEVICES (the pids dropped)."""
    return sorted(line.split()[0] for line in (directory / "servers.log").read_text().splitlines())


@pytest.mark.slow
@pytest.mark.xdist_group("rollout_servers")
def test_each_rank_launches_servers_on_its_own_gpu_and_updates_them(ranks):
    directory, results = ranks.run("own_gpus", [], fake_gpus=["3", "5"])
    assert _servers(directory) == ["3", "5"]  # not both on GPU 0
    assert len({url for r in results for url in r["urls"]}) == 2  # a server each
    for result in results:
        assert result["sends"]  # each rank updates its own servers ...
        assert result["versions"] == ["1"]  # ... so none keeps the initial weights
    # one copy of the weights per node, written by its first rank, read by both ranks' servers
    assert results[0]["weights_dir"] == results[1]["weights_dir"]
    assert not Path(results[0]["weights_dir"]).exists()  # a temporary one: removed


@pytest.mark.slow
@pytest.mark.xdist_group("rollout_servers")
def test_a_server_wider_than_a_rank_spans_its_neighbours_gpus(ranks):
    directory, results = ranks.run(
        "wide_server", ["actor_rollout_ref.rollout.tensor_model_parallel_size=2"],
        fake_gpus=["3", "5"],
    )  # fmt: skip
    assert _servers(directory) == ["3,5"]  # one server, on both ranks' GPUs
    assert results[0]["urls"] == results[1]["urls"]  # rank 1 uses rank 0's
    assert [r["sends"] for r in results] == [True, False]  # its launcher updates it
    assert results[0]["versions"] == ["1"]


@pytest.mark.slow
@pytest.mark.xdist_group("rollout_servers")
def test_a_shared_weights_dir_is_written_once_and_read_by_every_rank(ranks):
    shared = ranks.root / "shared_dir" / "shared" / "weights"
    _, results = ranks.run("shared_dir", [f"actor_rollout_ref.rollout.weights_dir={shared}"])
    assert [r["weights_dir"] for r in results] == [str(shared)] * 2
    assert all(r["versions"] == ["1"] for r in results)
    assert [p.name for p in shared.iterdir()] == ["step_1"]  # kept: not ours to remove


@pytest.mark.slow
@pytest.mark.xdist_group("rollout_servers")
def test_a_weights_dir_other_nodes_do_not_see_is_refused(ranks):
    shared = ranks.root / "blind_dir" / "local" / "weights"
    _, results = ranks.run("blind_dir", [f"actor_rollout_ref.rollout.weights_dir={shared}"],
                           blind=True)  # fmt: skip
    for result in results:
        assert "actor_rollout_ref.rollout.weights_dir=" in result["error"]
        assert "is not shared: rank(s) [1] cannot see a file rank 0 wrote there" in (
            result["error"]
        )
    assert list(shared.iterdir()) == []  # the probe is gone


def test_an_unwritable_weights_dir_is_refused_with_its_key(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=f"weights_dir={blocker}/w is not writable"):
        plan_disk_sync(blocker / "w", launched=False, owner=False)
    sync = plan_disk_sync(tmp_path / "new" / "w", launched=False, owner=False)
    assert (sync.writes, sync.sends, sync.directory) == (True, True, tmp_path / "new" / "w")
    assert list(sync.directory.iterdir()) == []


def _places(*ranks: tuple[str, int, tuple[str, ...]]) -> list[RankPlace]:
    return [RankPlace(host, local, gpus) for host, local, gpus in ranks]


def test_server_groups():
    one_gpu = [("a", i, (str(i),)) for i in range(4)] + [("b", i, (str(i),)) for i in range(4)]
    assert server_groups(_places(*one_gpu), 1) == [[r] for r in range(8)]
    assert server_groups(_places(*one_gpu), 2) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert server_groups(_places(*one_gpu), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # consecutive by local rank, whatever the rank order
    shuffled = _places(("a", 1, ("1",)), ("a", 0, ("0",)), ("a", 3, ("3",)), ("a", 2, ("2",)))
    assert server_groups(shuffled, 2) == [[1, 0], [3, 2]]  # the lowest local rank launches
    # a rank with a whole server's GPUs (the only rank of a node) or none (CPU) is alone
    assert server_groups(_places(("a", 0, tuple("01234567"))), 2) == [[0]]
    assert server_groups(_places(("a", 0, ()), ("a", 1, ())), 2) == [[0], [1]]
    with pytest.raises(ValueError, match="tensor_model_parallel_size=4 must divide the 2 ranks"):
        server_groups(_places(*one_gpu[:2]), 4)
    with pytest.raises(ValueError, match="rank 0 has 2 GPUs"):
        server_groups(_places(("a", 0, ("0", "1"))), 4)


@pytest.mark.parametrize(
    ("visible", "count", "local_rank", "local_world", "expected"),
    [
        ("6", 1, 6, 8, ["6"]),  # Ray: the rank's one GPU
        (None, 8, 3, 8, ["3"]),  # every rank sees the node's GPUs: its own by local rank
        ("0,1,2,3,4,5,6,7", 8, 0, 1, list("01234567")),  # the node's only rank: all of them
        ("4,5,6,7", 4, 1, 2, ["6", "7"]),
    ],
)
def test_rank_gpus(monkeypatch, visible, count, local_rank, local_world, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world))
    assert rank_gpus() == expected


def test_rank_gpus_on_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rollout_servers.rank_gpus() == []
