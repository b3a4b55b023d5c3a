"""FSDP2 workers: the actor/rollout/reference worker and the critic, with weight sync.

    from agentrl.workers import ActorRolloutRefWorker, CriticWorker

Each is an ``agentrl.distributed.Worker``: run it with ``RayWorkerGroup`` (one process per
rank) or ``InProcessWorkerGroup`` (world size 1). See docs/workers.md.
"""

from agentrl.workers.actor import ActorRolloutRefWorker
from agentrl.workers.critic import CriticWorker

__all__ = ["ActorRolloutRefWorker", "CriticWorker"]
