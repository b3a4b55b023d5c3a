"""The one trajectory type: the aligned token lists of a conversation, what a rollout trains.

`TokenTrajectory` holds, token by token, the ids, attention mask, positions, loss mask (1:
a model token, trained; 0: prompt, tool output, user turn, template text), the rollout's
log-probs and the policy version that wrote each token (-1: no model did). The request
state machine (`AsyncRolloutRequest`, request.py) and the gateway's recorded sessions
(`agentrl.gateway.sessions.Segment`) are both trajectories, so a token is appended, a turn
added and a trajectory cut in one place:

    t.append(ids, loss_mask=0)                            # prompt, tool output, ...
    content = t.add_model_output(renderer, ids, log_probs, version)   # a model turn
    t.append_delta(renderer, new_messages)                # messages after a model turn
    t.cut(keep)                                           # at most `keep` tokens
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agentrl.models.chat import ChatRenderer

ALIGNED = (
    "input_ids", "attention_mask", "position_ids", "loss_mask", "rollout_log_probs",
    "weight_versions",
)  # fmt: skip


@dataclass(kw_only=True)
class TokenTrajectory:
    """Token-aligned lists of one trajectory (module docstring)."""

    input_ids: list[int] = field(default_factory=list)
    attention_mask: list[int] = field(default_factory=list)
    position_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    rollout_log_probs: list[float] = field(default_factory=list)
    weight_versions: list[int] = field(default_factory=list)  # -1 where no model wrote it
    # Template text after the last model turn that is not in input_ids yet (e.g. the
    # newline after <|im_end|>); it opens the next delta.
    pending_suffix: str = ""
    # The ids of the template pieces appended so far, by text (ChatRenderer.pieces): the
    # sanity check re-encodes only the other pieces of the whole rendering.
    known_pieces: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)

    def append(
        self,
        ids: list[int],
        loss_mask: int,
        log_probs: list[float] | None = None,
        weight_version: int | Sequence[int] = -1,
    ) -> None:
        """Append tokens to every aligned list (log-probs 0.0 where none are given; the
        policy version that produced them, one for all or one per token, -1 for tokens no
        model wrote)."""
        if log_probs is not None and len(log_probs) != len(ids):
            raise ValueError(f"{len(log_probs)} log-probs for {len(ids)} tokens")
        if not isinstance(weight_version, int) and len(weight_version) != len(ids):
            raise ValueError(f"{len(weight_version)} weight versions for {len(ids)} tokens")
        start = len(self.input_ids)
        self.input_ids.extend(ids)
        self.attention_mask.extend([1] * len(ids))
        self.position_ids.extend(range(start, start + len(ids)))
        self.loss_mask.extend([loss_mask] * len(ids))
        self.rollout_log_probs.extend(log_probs if log_probs is not None else [0.0] * len(ids))
        if isinstance(weight_version, int):
            self.weight_versions.extend([weight_version] * len(ids))
        else:
            self.weight_versions.extend(int(v) for v in weight_version)

    def add_model_output(
        self,
        renderer: ChatRenderer,
        output_ids: list[int],
        log_probs: list[float] | None,
        weight_version: int | Sequence[int] = -1,
    ) -> str:
        """Append a model turn's exact ids (loss mask 1) with the policy version that wrote
        them; return its content text (without the end-of-turn markup the model wrote,
        whose missing rest becomes `pending_suffix`)."""
        self.append(list(output_ids), 1, log_probs, weight_version)
        content, self.pending_suffix = renderer.split_turn_end(renderer.decode(output_ids))
        return content

    def append_delta(self, renderer: ChatRenderer, messages: list[dict]) -> None:
        """Append the template delta of `messages` after the last turn, and the next
        generation prompt (loss mask 0)."""
        text = self.pending_suffix + renderer.delta_text(messages)
        self.pending_suffix = ""
        ids = renderer.encode(text)
        renderer.pieces.remember(text, ids, self.known_pieces)
        self.append(ids, 0)

    def cut(self, keep: int) -> bool:
        """Keep the first `keep` tokens of every aligned list; whether anything was cut."""
        if len(self.input_ids) <= keep:
            return False
        for name in ALIGNED:
            del getattr(self, name)[keep:]
        return True

    def copy_tokens(self, other: TokenTrajectory) -> None:
        """Take `other`'s aligned lists (copies), pending suffix and known pieces."""
        for name in ALIGNED:
            setattr(self, name, list(getattr(other, name)))
        self.pending_suffix = other.pending_suffix
        self.known_pieces = dict(other.known_pieces)
