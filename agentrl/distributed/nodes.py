"""The Ray nodes of a worker group's ranks, and what became of one whose rank was lost.

    table = node_table()                              # node id -> NodeInfo, from Ray's GCS
    describe_node(node_id, table)                     # "node 56b8... (node_b, 192.0.2.2)"
    lost_node_state(node_id)                          # why a rank's process on it is gone

A rank whose Ray call fails with a Ray error (its actor died or is unreachable) is lost
with its process; the question for the user is whether the node went with it. Ray's node
table answers late: the GCS marks a node dead only after it has missed its health checks
(about 15-30 s by default). So the raylet's own port is probed too, with a short timeout:
a node whose raylet neither answers nor is marked dead yet is reported as lost all the
same, and one whose raylet answers lost only the worker process.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

RAYLET_PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class NodeInfo:
    """One row of Ray's node table."""

    node_id: str
    name: str  # `ray start --node-name`; Ray's default is the node's IP address
    address: str  # the node's IP address
    raylet_port: int
    alive: bool  # as the GCS sees it (late: see the module docstring)


def node_table() -> dict[str, NodeInfo]:
    """Every node Ray knows (dead ones too), by node id."""
    import ray

    table = {}
    for row in ray.nodes():
        address = str(row.get("NodeManagerAddress", ""))
        table[row["NodeID"]] = NodeInfo(
            node_id=row["NodeID"],
            name=str(row.get("NodeName") or address),
            address=address,
            raylet_port=int(row.get("NodeManagerPort", 0)),
            alive=bool(row.get("Alive", False)),
        )
    return table


def describe_node(node_id: str | None, table: dict[str, NodeInfo]) -> str:
    """``node <id> (<name>, <ip>)``, or what is known of it."""
    if node_id is None:
        return "an unknown node"
    info = table.get(node_id)
    if info is None:
        return f"node {node_id}"
    if info.name == info.address:
        return f"node {node_id} ({info.address})"
    return f"node {node_id} ({info.name}, {info.address})"


def raylet_answers(address: str, port: int, timeout_s: float = RAYLET_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the raylet's port opens within ``timeout_s``."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def lost_node_state(node_id: str | None) -> str:
    """Why a rank on ``node_id`` is gone: its node is lost (dead in Ray's node table, or its
    raylet does not answer), or only its worker process died. Never raises: a failure to
    ask Ray is part of the answer."""
    try:
        table = node_table()
    except Exception as exc:  # noqa: BLE001 - the GCS itself may be gone with the head node
        return f"{describe_node(node_id, {})}, state unknown (Ray's node table: {exc})"
    where = describe_node(node_id, table)
    info = table.get(node_id) if node_id is not None else None
    if info is None:
        return f"{where}, not in Ray's node table"
    if not info.alive:
        return f"{where} is lost: Ray marks it dead"
    if not raylet_answers(info.address, info.raylet_port):
        return (
            f"{where} is lost: its raylet at {info.address}:{info.raylet_port} does not "
            "answer (Ray has not marked it dead yet)"
        )
    return f"{where} is up (its raylet answers); the worker process died"
