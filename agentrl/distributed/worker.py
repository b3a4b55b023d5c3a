"""The process side of a worker group: the Worker base class and the host that runs roles.

One host runs per rank (a Ray actor, or an object in the driver for the in-process group).
It sets the torch.distributed environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), joins the process group with a
timeout (gloo on CPU, nccl for CUDA tensors), then builds its roles: one ``Worker`` per
role, several when roles are colocated (actor + rollout + ref + critic in one process, as
verl's ``create_colocated_worker_cls``), all sharing the process and its process group.

Calls never raise across the process boundary: ``execute`` returns the method's value, or
a ``RankFailure`` with the rank, the exception and its formatted traceback, which the group
turns into one ``WorkerError`` on the driver.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import traceback
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from agentrl.plugins import load_object

logger = logging.getLogger(__name__)

DEFAULT_ROLE = "default"
_single_process_users = 0  # in-process hosts sharing this process's world-size-1 group


class Worker:
    """Base class of a role that runs on every rank of a worker group.

    Subclasses mark the methods the driver may call with
    ``@register(Dispatch.<MODE>)`` (``agentrl.distributed.dispatch``). The constructor runs
    after the process group is up, so it may use collectives; heavy setup usually goes in
    a registered ``init_model`` so that the driver decides when it happens.
    """

    @property
    def rank(self) -> int:
        """This process's rank in the worker group."""
        return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", 0))

    @property
    def world_size(self) -> int:
        """Number of ranks in the worker group."""
        if dist.is_initialized():
            return dist.get_world_size()
        return int(os.environ.get("WORLD_SIZE", 1))

    @property
    def device(self) -> torch.device:
        """The device this rank computes on (its GPU, or the CPU)."""
        return current_device()

    def close(self) -> None:
        """Release what the worker holds (servers, threads); called when its group shuts
        down. The default has nothing to release."""


class WorkerSpec:
    """A worker class and its constructor arguments: ``WorkerSpec(Cls, *args, **kwargs)``.

    ``cls`` may be a dotted path (``pkg.mod.Cls`` or ``file.py:Cls``); it must name a
    ``Worker`` subclass.
    """

    def __init__(self, cls: type[Worker] | str, *args: Any, **kwargs: Any) -> None:
        if isinstance(cls, str):
            cls = load_object(cls, expected_base=Worker)
        if not (isinstance(cls, type) and issubclass(cls, Worker)):
            raise TypeError(f"{cls!r} is not a subclass of agentrl.distributed.Worker")
        self.cls = cls
        self.args = args
        self.kwargs = kwargs

    def build(self) -> Worker:
        """Instantiate the worker."""
        return self.cls(*self.args, **self.kwargs)

    def __repr__(self) -> str:
        return f"WorkerSpec({self.cls.__qualname__})"


@dataclass
class RankFailure:
    """An exception raised by a worker method on one rank, as plain picklable data."""

    rank: int
    exc_type: str
    message: str
    traceback: str = ""
    lost: str = ""  # the rank's process is gone: its node and what became of it (nodes.py)

    @classmethod
    def from_exception(cls, rank: int, exc: BaseException) -> RankFailure:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(rank, type(exc).__name__, str(exc), text)


class WorkerError(RuntimeError):
    """A worker-group call failed on at least one rank; the message holds each failing
    rank's traceback. ``stopped`` is true when the group killed ranks that did not finish
    (a failed rank leaves its peers waiting in collectives), so the group is unusable.
    ``lost`` maps each rank whose process is gone to its node and what became of it; its
    first line names them."""

    def __init__(
        self, what: str, failures: list[RankFailure], world_size: int, stopped: bool = False
    ) -> None:
        self.what = what
        self.failures = failures
        self.world_size = world_size
        self.stopped = stopped
        self.ranks = [f.rank for f in failures]
        self.lost = {f.rank: f.lost for f in failures if f.lost}
        super().__init__(self._message())

    def _message(self) -> str:
        head = f"{self.what} failed on rank {', '.join(map(str, self.ranks))} of {self.world_size}"
        for rank, lost in self.lost.items():
            head += f"; rank {rank}: {lost}"
        if self.stopped:
            head += " (the ranks still running were stopped; the worker group is unusable)"
        parts = [head + ":"]
        for failure in self.failures:
            parts.append(f"--- rank {failure.rank}: {failure.exc_type}: {failure.message}")
            if failure.traceback:
                parts.append(failure.traceback.rstrip())
        return "\n".join(parts)


def current_device() -> torch.device:
    """The GPU of this rank when CUDA is available, else the CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    # Ray shows each GPU actor only its own GPU; without that isolation use LOCAL_RANK.
    count = torch.cuda.device_count()
    return torch.device("cuda", 0 if count == 1 else int(os.environ.get("LOCAL_RANK", 0)))


def default_backend() -> str:
    """gloo for CPU tensors, plus nccl for CUDA tensors when a GPU is present."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def free_address() -> tuple[str, int]:
    """This node's IP address and a free TCP port on it (for MASTER_ADDR/MASTER_PORT)."""
    try:
        import ray

        host = ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
    except ImportError:
        host = "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return host, sock.getsockname()[1]


class WorkerHost:
    """Runs the roles of one rank; the Ray actor class of RayWorkerGroup (and the single
    host of InProcessWorkerGroup). ``env`` is set in ``os.environ`` first."""

    def __init__(self, specs: dict[str, WorkerSpec], env: dict[str, str] | None = None):
        os.environ.update(env or {})
        self._specs = specs
        self._roles: dict[str, Worker] = {}
        self._owns_group = False
        self._single_process = False

    @property
    def rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", 0))

    def free_address(self) -> tuple[str, int]:
        """Rank 0 picks the rendezvous address of the group."""
        return free_address()

    def node_id(self) -> str | None:
        """The Ray node this rank runs on (None outside Ray)."""
        try:
            import ray
        except ImportError:
            return None
        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None

    def setup(
        self, master_addr: str | None, master_port: int | None, timeout_s: float
    ) -> RankFailure | None:
        """Join the process group (a private one of size 1 when ``master_addr`` is None),
        then build the roles. Returns the failure instead of raising."""
        try:
            if master_addr is None:
                self._join_single_process_group(timeout_s)
            else:
                os.environ["MASTER_ADDR"] = master_addr
                os.environ["MASTER_PORT"] = str(master_port)
                self._join_process_group(timeout_s)
            for role, spec in self._specs.items():
                self._roles[role] = spec.build()
        except BaseException as exc:  # noqa: BLE001 - reported to the driver, not swallowed
            logger.exception("rank %d: worker setup failed", self.rank)
            return RankFailure.from_exception(self.rank, exc)
        return None

    def _join_process_group(self, timeout_s: float) -> None:
        if torch.cuda.is_available():
            torch.cuda.set_device(current_device())
        dist.init_process_group(
            backend=default_backend(),
            init_method="env://",
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        self._owns_group = True
        logger.info(
            "rank %d/%d joined the process group at %s:%s",
            dist.get_rank(),
            dist.get_world_size(),
            os.environ["MASTER_ADDR"],
            os.environ["MASTER_PORT"],
        )

    def _join_single_process_group(self, timeout_s: float) -> None:
        # A HashStore rendezvous needs no port; the group is shared by every in-process
        # host of this process (actor and critic groups of one debugging session).
        global _single_process_users
        if not dist.is_initialized():
            dist.init_process_group(
                backend=default_backend(),
                store=dist.HashStore(),
                rank=0,
                world_size=1,
                timeout=datetime.timedelta(seconds=timeout_s),
            )
        elif dist.get_world_size() != 1:
            raise RuntimeError(
                "an in-process worker group needs world size 1, but this process "
                f"is already in a group of {dist.get_world_size()}"
            )
        _single_process_users += 1
        self._single_process = True

    def execute(self, role: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``method`` of ``role``; returns its value or a RankFailure."""
        try:
            return getattr(self._roles[role], method)(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported to the driver, not swallowed
            logger.exception("rank %d: %s.%s failed", self.rank, role, method)
            return RankFailure.from_exception(self.rank, exc)

    def shutdown(self) -> None:
        """Drop the roles and leave the process group if this host joined it."""
        global _single_process_users
        for role, worker in self._roles.items():
            try:
                worker.close()
            except Exception:  # noqa: BLE001 - one role's cleanup must not block the others
                logger.exception("rank %d: closing role %s failed", self.rank, role)
        self._roles.clear()
        if self._single_process:
            self._single_process = False
            _single_process_users -= 1
            if _single_process_users == 0 and dist.is_initialized():
                dist.destroy_process_group()
        elif self._owns_group and dist.is_initialized():
            self._owns_group = False
            dist.destroy_process_group()
