"""What the off-policy producer (producer.py) keeps per prompt, and what a take reports.

A ``PromptGroup`` is one prompt of the data order and, once finished, its ``n`` requests;
the producer's buffer, queue and checkpoint (``record`` / ``from_record``) hold these.
``TakeStats`` is what one ``take`` saw, the source of the per-step ``async/*`` metrics.

Versions. Policy version v is the actor after v updates; the servers report the version
of every generation call and each model token keeps it (``AsyncRolloutRequest.weight_versions``).
The trainer's step s updates version s - 1, so a trajectory's staleness at step s is
``s - 1 - (its oldest token's version)``.
A group's ``versions`` are its model tokens' versions, ``oldest_version`` the one its
staleness counts from (``staler_than``: the producer drops such groups and generates their
prompts again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.protocol import DataProto
from agentrl.rollout.request import AsyncRolloutRequest


@dataclass
class PromptGroup:
    """One prompt of the data order and, once finished, its ``n`` requests."""

    uid: str  # "{batch}-{row}": the prompt's place in the data order
    batch_index: int  # the loader batch (1-based) it came from
    prompt: DataProto  # the one-row prompt batch, uid column included
    requests: list[AsyncRolloutRequest] = field(default_factory=list)
    seconds: float = 0.0
    started_version: int = 0  # the servers' version when its generation started

    @property
    def versions(self) -> list[int]:
        """The policy versions of its model tokens (loss-mask 1), each once, sorted."""
        return sorted({v for r in self.requests
                       for v, m in zip(r.weight_versions, r.loss_mask, strict=True) if m})

    def oldest_version(self) -> int | None:
        """The oldest policy version among its model tokens; None when it has none."""
        versions = self.versions
        if versions and versions[0] < 0:
            raise RuntimeError(
                f"prompt {self.uid}: the inference backend reported no weight_version for "
                "some generations; the off-policy modes need it on every generation call"
            )
        if versions and versions[0] < self.started_version:
            raise RuntimeError(
                f"prompt {self.uid}: the inference servers reported weight version "
                f"{versions[0]} for a generation started after version "
                f"{self.started_version} was synced; a weight update did not reach them"
            )
        return versions[0] if versions else None

    def staler_than(self, floor: int) -> bool:
        """Whether its oldest model token is older than version ``floor`` (a group without
        model tokens never is)."""
        version = self.oldest_version()
        return version is not None and version < floor

    def record(self, with_requests: bool = True) -> dict[str, Any]:
        """The group as the producer's checkpoint keeps it (``from_record`` reads it back);
        an unfinished one without its requests."""
        return {"uid": self.uid, "batch_index": self.batch_index, "prompt": self.prompt,
                "requests": self.requests if with_requests else [], "seconds": self.seconds}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PromptGroup:
        """The group ``record`` wrote (``started_version`` is set again when it starts)."""
        return cls(record["uid"], int(record["batch_index"]), record["prompt"],
                   list(record["requests"]), float(record["seconds"]))


@dataclass
class TakeStats:
    """What one ``take`` saw: the per-step ``async/*`` metrics come from it."""

    rollout_idle_s: float  # time the producer had nothing to generate since the last take
    dropped: int  # groups dropped as too stale (their prompts are generated again)
    buffer_size: int  # finished groups left waiting after the take
