"""Worker groups: call a registered worker method on every rank from the driver.

    group = InProcessWorkerGroup(WorkerSpec(ActorRolloutRefWorker, config, role="actor"))
    group.init_model()                       # ONE_TO_ALL
    out = group.compute_log_prob(batch)      # DP_COMPUTE: split by rank, concatenated

A group holds one or more roles. With one ``WorkerSpec`` its registered methods are
attributes of the group itself; with a dict of specs the roles are colocated (one process
per rank runs them all, sharing the device and the process group) and each role is reached
through ``group.role(name)`` (or ``group.spawn()``, verl's name), which has that role's
methods. ``RayWorkerGroup`` (``agentrl.distributed.ray_group``) runs one Ray actor per rank;
``InProcessWorkerGroup`` here runs world size 1 in the driver process with the same
interface, for a plain debugger and fast tests. A failure on any rank raises
``WorkerError`` with every failing rank's traceback.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping
from typing import Any

from agentrl.distributed.dispatch import (
    DispatchSpec,
    RankCalls,
    collect_results,
    registered_methods,
    split_arguments,
)
from agentrl.distributed.worker import (
    DEFAULT_ROLE,
    RankFailure,
    WorkerError,
    WorkerHost,
    WorkerSpec,
)

DEFAULT_DIST_TIMEOUT_S = 600.0


def normalize_specs(workers: WorkerSpec | Mapping[str, WorkerSpec]) -> dict[str, WorkerSpec]:
    """One spec -> ``{"default": spec}``; a mapping is checked and copied."""
    if isinstance(workers, WorkerSpec):
        return {DEFAULT_ROLE: workers}
    if not isinstance(workers, Mapping) or not workers:
        raise TypeError(
            f"workers must be a WorkerSpec or a non-empty dict role -> WorkerSpec, got {workers!r}"
        )
    for role, spec in workers.items():
        if not isinstance(spec, WorkerSpec):
            raise TypeError(f"role {role!r}: expected a WorkerSpec, got {type(spec).__name__}")
    return dict(workers)


class RoleGroup:
    """The methods of one role of a worker group (all its ranks)."""

    def __init__(self, group: WorkerGroup, role: str, cls: type) -> None:
        self.group = group
        self.role = role
        self.worker_cls = cls
        _bind_methods(self, group, role, cls)

    @property
    def world_size(self) -> int:
        return self.group.world_size

    def __repr__(self) -> str:
        return f"RoleGroup({self.role!r}: {self.worker_cls.__qualname__} x {self.world_size})"


def _bind_methods(target: object, group: WorkerGroup, role: str, cls: type) -> None:
    for name, spec in registered_methods(cls).items():
        if hasattr(type(target), name) or name in vars(target):
            raise ValueError(
                f"{cls.__qualname__}.{name} clashes with an attribute of "
                f"{type(target).__name__}; rename the worker method"
            )
        setattr(target, name, _make_caller(group, role, name, spec, getattr(cls, name)))


def _make_caller(group: WorkerGroup, role: str, name: str, spec: DispatchSpec, original: Any):
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        return group.call_method(role, name, spec, args, kwargs)

    return call


class WorkerGroup:
    """Common driver-side logic: roles, method binding, dispatch and collection."""

    def __init__(self, workers: WorkerSpec | Mapping[str, WorkerSpec]) -> None:
        self.specs = normalize_specs(workers)
        self._roles = {role: RoleGroup(self, role, spec.cls) for role, spec in self.specs.items()}
        if list(self.specs) == [DEFAULT_ROLE]:
            _bind_methods(self, self, DEFAULT_ROLE, self.specs[DEFAULT_ROLE].cls)

    @property
    def world_size(self) -> int:
        raise NotImplementedError

    @property
    def usable(self) -> bool:
        """False once the group cannot run calls (shut down, or a rank was lost or stopped);
        a caller cleaning up after an error then skips the workers' own cleanup calls."""
        raise NotImplementedError

    def role(self, name: str) -> RoleGroup:
        """The methods of one colocated role."""
        if name not in self._roles:
            raise KeyError(f"no role {name!r} in this worker group; roles: {sorted(self._roles)}")
        return self._roles[name]

    def spawn(self) -> dict[str, RoleGroup]:
        """Role name -> its methods (verl's ``spawn`` of a colocated group)."""
        return dict(self._roles)

    def call_method(
        self,
        role: str,
        name: str,
        spec: DispatchSpec,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Dispatch one call to every rank, wait for all, merge the results."""
        what = f"{self.specs[role].cls.__qualname__}.{name}"
        calls = split_arguments(spec, self.world_size, args, kwargs, what)
        results = self._run(role, name, calls, what)
        return collect_results(spec, results, calls.pad_size, what, calls.padded_length)

    def _run(self, role: str, name: str, calls: RankCalls, what: str) -> list[Any]:
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()


class InProcessWorkerGroup(WorkerGroup):
    """World size 1 in the driver process: no Ray, the same interface as RayWorkerGroup.

    The process joins a private gloo (and nccl on GPU) group of size 1, so FSDP2 and
    collectives run unchanged; several in-process groups share it.
    """

    def __init__(
        self,
        workers: WorkerSpec | Mapping[str, WorkerSpec],
        dist_timeout_s: float = DEFAULT_DIST_TIMEOUT_S,
    ) -> None:
        super().__init__(workers)
        self._host: WorkerHost | None = WorkerHost(self.specs)
        # A group dropped without shutdown() (a notebook cell, a test) still leaves the
        # process group once it is collected: no torch.distributed group outlives it.
        self._release = weakref.finalize(self, self._host.shutdown)
        failure = self._host.setup(None, None, dist_timeout_s)
        if failure is not None:
            self._release()
            self._host = None
            raise WorkerError("worker group setup", [failure], 1)

    @property
    def world_size(self) -> int:
        return 1

    @property
    def usable(self) -> bool:
        return self._host is not None

    def worker(self, role: str = DEFAULT_ROLE) -> Any:
        """The worker object itself, for inspection in a debugger or a test."""
        return self._live_host()._roles[role]

    def _live_host(self) -> WorkerHost:
        if self._host is None:
            raise RuntimeError("this in-process worker group was shut down")
        return self._host

    def _run(self, role: str, name: str, calls: RankCalls, what: str) -> list[Any]:
        result = self._live_host().execute(role, name, calls.args[0], calls.kwargs[0])
        if isinstance(result, RankFailure):
            raise WorkerError(what, [result], 1)
        return [result]

    def shutdown(self) -> None:
        """Close the roles and leave the process group (the last in-process group of this
        process destroys it). Safe to call twice."""
        if self._host is not None:
            self._release()  # runs WorkerHost.shutdown once, and not again when collected
            self._host = None
