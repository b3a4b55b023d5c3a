"""What a lost rank's error says about its node: Ray's node table, then the raylet's port."""

from __future__ import annotations

import socket

import pytest

from agentrl.distributed import nodes
from agentrl.distributed.nodes import NodeInfo, describe_node, lost_node_state, raylet_answers

ray = pytest.importorskip("ray")


def _row(node_id: str, name: str, port: int, alive: bool = True) -> dict:
    return {"NodeID": node_id, "NodeName": name, "NodeManagerAddress": "127.0.0.1",
            "NodeManagerPort": port, "Alive": alive}  # fmt: skip


@pytest.fixture
def listening_port():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


def test_node_table_reads_rays_rows(monkeypatch):
    monkeypatch.setattr(ray, "nodes", lambda: [_row("a1", "node_a", 7001),
                                              _row("b2", "127.0.0.1", 7002, alive=False)])  # fmt: skip
    table = nodes.node_table()
    assert table["a1"] == NodeInfo("a1", "node_a", "127.0.0.1", 7001, True)
    assert not table["b2"].alive
    assert describe_node("a1", table) == "node a1 (node_a, 127.0.0.1)"
    assert describe_node("b2", table) == "node b2 (127.0.0.1)"  # unnamed: Ray names it by IP
    assert describe_node("c3", table) == "node c3"
    assert describe_node(None, table) == "an unknown node"


def test_raylet_probe(listening_port, closed_port):
    assert raylet_answers("127.0.0.1", listening_port)
    assert not raylet_answers("127.0.0.1", closed_port, timeout_s=0.5)


def test_a_lost_node_is_named_whether_or_not_ray_has_marked_it_dead(
    monkeypatch, listening_port, closed_port
):
    rows = [_row("dead", "node_b", closed_port, alive=False),
            _row("silent", "node_c", closed_port),
            _row("up", "node_a", listening_port)]  # fmt: skip
    monkeypatch.setattr(ray, "nodes", lambda: rows)
    assert lost_node_state("dead") == "node dead (node_b, 127.0.0.1) is lost: Ray marks it dead"
    assert lost_node_state("silent") == (
        f"node silent (node_c, 127.0.0.1) is lost: its raylet at 127.0.0.1:{closed_port} does "
        "not answer (Ray has not marked it dead yet)"
    )
    assert lost_node_state("up") == (
        "node up (node_a, 127.0.0.1) is up (its raylet answers); the worker process died"
    )
    assert lost_node_state("gone") == "node gone, not in Ray's node table"


def test_a_failing_node_table_is_part_of_the_answer(monkeypatch):
    def unreachable():
        raise ConnectionError("GCS unreachable")

    monkeypatch.setattr(ray, "nodes", unreachable)
    assert lost_node_state("a1") == "node a1, state unknown (Ray's node table: GCS unreachable)"
