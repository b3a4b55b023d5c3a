"""Ray resource pools and worker groups; an in-process group of one with the same interface.

    from agentrl.distributed import (Dispatch, InProcessWorkerGroup, RayWorkerGroup,
                                     ResourcePool, Worker, WorkerSpec, register)

A ``Worker`` subclass marks its driver-callable methods with ``@register(Dispatch.X)``;
a group runs one instance per rank (several colocated roles per process when given a dict
of specs) and exposes those methods, dispatching ``DataProto`` by data-parallel rank.
See docs/workers.md.
"""

from agentrl.distributed.dispatch import Dispatch, DispatchSpec, register, registered_methods
from agentrl.distributed.group import InProcessWorkerGroup, RoleGroup, WorkerGroup
from agentrl.distributed.ray_group import RayWorkerGroup
from agentrl.distributed.resource_pool import ResourcePool
from agentrl.distributed.worker import (
    DEFAULT_ROLE,
    RankFailure,
    Worker,
    WorkerError,
    WorkerHost,
    WorkerSpec,
)

__all__ = [
    "DEFAULT_ROLE",
    "Dispatch",
    "DispatchSpec",
    "InProcessWorkerGroup",
    "RankFailure",
    "RayWorkerGroup",
    "ResourcePool",
    "RoleGroup",
    "Worker",
    "WorkerError",
    "WorkerGroup",
    "WorkerHost",
    "WorkerSpec",
    "register",
    "registered_methods",
]
