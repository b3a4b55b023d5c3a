"""The SGLang servers of the trainer ranks' rollouts: which rank launches which servers on
which GPUs, and which rank writes the weights and tells which servers to load them.

    servers = launch_rank_servers(rollout_cfg, model_path, tokenizer)   # a collective
    sync = plan_disk_sync(weights_dir, launched=True, owner=servers.owner)  # a collective
    export_hf(sync.directory / "step_3", model, bucket_bytes=b, writer=sync.writes)
    if sync.sends:
        await servers.backend.update_weights(str(sync.directory / "step_3"))

**Placement** (``rollout.server_urls`` empty). Each rank launches servers on the GPUs it may
use (``rank_gpus``: the one Ray gave it, or its share of the node's by local rank), so they sit
beside its training shard and sleep while it trains. A server of
``tensor_model_parallel_size`` tp more than a rank's one GPU spans the GPUs of tp
consecutive local ranks of one node (``server_groups``): the first of them launches it with
all their GPUs, the others are clients of it (its URLs reach them by an all-gather).

**Weights by disk** (``plan_disk_sync``). Every rank gathers the weights (a collective); the
writers write them as a Hugging Face directory, and the senders send its path to their
servers (``/update_weights_from_disk``), which read it themselves:

| servers | ``rollout.weights_dir`` | writes | sends, to |
|---|---|---|---|
| listed (``server_urls``) | a path every server reads | rank 0 | rank 0, every listed server |
| listed | null | rank 0, into a temporary directory | rank 0 (the servers must see rank 0's disk) |
| launched by the ranks | a path every node mounts (checked) | rank 0 | each rank that launched servers, its own |
| launched by the ranks | null | the first rank of each node, into a temporary directory there | each rank that launched servers, its own |
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.distributed import process_group
from agentrl.rollout.backends.factory import create_backend
from agentrl.rollout.backends.launcher import visible_gpus

logger = logging.getLogger(__name__)

WEIGHTS_DIR_KEY = "actor_rollout_ref.rollout.weights_dir"


def rank_gpus() -> list[str]:
    """The GPUs this rank may use, as CUDA_VISIBLE_DEVICES names them on its node: the one
    Ray gave it; where a rank sees several, its share of them by local rank (all of them for
    the only rank of a node), matching ``current_device``; [] without CUDA."""
    if not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    names = (visible_gpus() or [str(i) for i in range(count)])[:count]
    local_world = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    share = max(1, count // local_world)
    first = min(int(os.environ.get("LOCAL_RANK", 0)) * share, count - share)
    return names[first : first + share]


@dataclass(frozen=True)
class RankPlace:
    """Where a rank runs: its node (host name), its local rank, its GPUs."""

    host: str
    local_rank: int
    gpus: tuple[str, ...]


def server_groups(places: Sequence[RankPlace], tp: int) -> list[list[int]]:
    """The ranks grouped by the servers they use, each group's first rank the one that
    launches them: a rank alone when it has no GPU (CPU) or GPUs for a whole server, else tp
    ranks of one GPU each, consecutive by local rank on one node."""
    groups: list[list[int]] = []
    sharing: dict[str, list[int]] = {}
    for rank, place in enumerate(places):
        if not place.gpus or len(place.gpus) >= tp:
            groups.append([rank])
        elif len(place.gpus) == 1:
            sharing.setdefault(place.host, []).append(rank)
        else:
            raise ValueError(
                f"rank {rank} has {len(place.gpus)} GPUs ({','.join(place.gpus)}): neither a "
                f"whole server of actor_rollout_ref.rollout.tensor_model_parallel_size={tp} "
                "nor one GPU to share a server with its neighbours"
            )
    for host, ranks in sharing.items():
        ranks.sort(key=lambda r: places[r].local_rank)
        if len(ranks) % tp:
            raise ValueError(
                f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} must divide the "
                f"{len(ranks)} ranks on node {host}: each server spans the GPUs of {tp} of them"
            )
        groups += [ranks[i : i + tp] for i in range(0, len(ranks), tp)]
    return sorted(groups)


@dataclass
class RankServers:
    """A rank's client of its servers; ``owner``: this rank launched them (and updates
    them); ``group``: the ranks using them."""

    backend: Any
    owner: bool
    group: list[int]


def launch_rank_servers(
    rollout: Mapping[str, Any], model_path: str | None, tokenizer: Any,
    gpus: Sequence[str] | None = None,
) -> RankServers:  # fmt: skip
    """Launch this rank's share of the servers and connect to the ones it uses (a
    collective: every rank calls it). ``rollout``: ``actor_rollout_ref.rollout`` with
    ``server_urls`` empty; ``gpus``: this rank's (None: ``rank_gpus()``)."""
    rank = process_group.rank()
    tp = int(rollout["tensor_model_parallel_size"])
    place = RankPlace(socket.gethostname(), int(os.environ.get("LOCAL_RANK", 0)),
                      tuple(rank_gpus() if gpus is None else gpus))  # fmt: skip
    places = process_group.all_gather_object(place)
    group = next(g for g in server_groups(places, tp) if rank in g)
    leader = group[0]
    backend, failure = None, None
    if rank == leader:
        group_gpus = [g for r in group for g in places[r].gpus]
        try:
            backend = create_backend(rollout, model_path, tokenizer, gpus=group_gpus or None)
        except Exception as exc:  # noqa: BLE001 - raised below, after the group learns of it
            failure = exc
    launched = process_group.all_gather_object(
        (list(backend.server_urls), None) if backend is not None else (None, repr(failure))
    )
    if failure is not None:
        raise failure
    if rank != leader:
        urls, error = launched[leader]
        if error is not None:
            raise RuntimeError(f"rank {leader} could not launch the servers rank {rank} "
                               f"shares with it: {error}")  # fmt: skip
        backend = create_backend({**rollout, "server_urls": urls, "control_urls": []},
                                 model_path, tokenizer)  # fmt: skip
    gpu_names = ",".join(g for r in group for g in places[r].gpus) or "none"
    logger.info("rank %d: rollout servers %s, launched by rank %d on GPUs %s for ranks %s",
                rank, ", ".join(backend.server_urls), leader, gpu_names, group)  # fmt: skip
    return RankServers(backend, owner=rank == leader, group=group)


@dataclass
class DiskSync:
    """A rank's part in a weight update by disk (module docstring): whether it writes the
    directory, whether it sends the path to its backend's servers, the directory its servers
    read (a writer's own), and whether it made that directory (``close`` removes it)."""

    writes: bool
    sends: bool
    directory: Path
    temporary: bool = False

    def close(self) -> None:
        if self.temporary:
            shutil.rmtree(self.directory, ignore_errors=True)


def plan_disk_sync(weights_dir: str | os.PathLike | None, launched: bool,
                   owner: bool) -> DiskSync:  # fmt: skip
    """Each rank's ``DiskSync`` (a collective). ``weights_dir``: ``rollout.weights_dir``;
    ``launched``: the ranks launched the servers; ``owner``: this rank launched its own."""
    rank = process_group.rank()
    sends = owner if launched else rank == 0
    if weights_dir is None:
        hosts = process_group.all_gather_object(socket.gethostname())
        writer = hosts.index(hosts[rank]) if launched else 0  # first rank of the node, or 0
        made = tempfile.mkdtemp(prefix="agentrl_weights_") if rank == writer else None
        directory = process_group.all_gather_object(made)[writer]
        return DiskSync(writes=rank == writer, sends=sends, directory=Path(directory),
                        temporary=made is not None)  # fmt: skip
    directory = Path(weights_dir)
    probe, problem = (_probe(directory) if rank == 0 else (None, None))
    probe, problem = process_group.all_gather_object((probe, problem))[0]
    if problem is not None:
        raise ValueError(f"{WEIGHTS_DIR_KEY}={directory} is not writable: {problem}")
    blind = process_group.all_gather_object(launched and sends and not _sees(Path(probe)))
    process_group.barrier()  # every rank has looked
    if rank == 0:
        Path(probe).unlink(missing_ok=True)
    blind_ranks = [r for r, b in enumerate(blind) if b]
    if blind_ranks:
        raise ValueError(
            f"{WEIGHTS_DIR_KEY}={directory} is not shared: rank(s) {blind_ranks} cannot see a "
            "file rank 0 wrote there, so the servers they launched could not load the "
            "weights; set it to a directory every node mounts at that path, or to null (a "
            "temporary directory on each node)"
        )
    return DiskSync(writes=rank == 0, sends=sends, directory=directory)


def _probe(directory: Path) -> tuple[str | None, str | None]:
    """Create ``directory`` and a file in it: (the file, None), or (None, why not)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, path = tempfile.mkstemp(prefix=".agentrl_probe_", dir=directory)
        os.close(handle)
    except OSError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return path, None


def _sees(path: Path) -> bool:
    """Whether this rank sees ``path`` (a file rank 0 made in the shared directory)."""
    return path.exists()


__all__ = [
    "DiskSync",
    "RankPlace",
    "RankServers",
    "launch_rank_servers",
    "plan_disk_sync",
    "rank_gpus",
    "server_groups",
]
