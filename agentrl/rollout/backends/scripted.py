"""The ``scripted`` backend: a fixed policy that answers from a file, for driving any
pipeline (the engine, the gateway, a real agent CLI) with known model outputs.

    actor_rollout_ref.rollout.name: scripted
    actor_rollout_ref.rollout.engine_kwargs.replies: /path/replies.jsonl

``replies`` is a JSONL file of assistant texts, one a line: a JSON string, or an object
with a ``"text"`` key (blank lines are skipped). Each generation of a trajectory answers
with the next line: a trajectory's k-th call (k = 0, 1, ...) gets line k. The text is
tokenized with the model's tokenizer (``encode``, no special tokens added) and, when the
call has ``stop_token_ids`` and the text does not already end with one, the first of them
is appended, as a model that stops emits it; those ids are the policy's output ids (they
are in ``GenerationOutput.output_ids``, log-probs 0.0), ``finish_reason`` ``stop``
(``length`` when ``max_new_tokens`` cuts them).

Which trajectory a call belongs to, and which call it is, is read from its id:

- the rollout engine names its calls ``{request_id}-t{turn}-a{attempt}``
  (agentrl/rollout/generation.py) and the gateway ``{session_id}-t{k}-a0`` with k its
  calls in the session so far (agentrl/gateway/server.py; calls outside the episode, such
  as a CLI's title generation, run under the session ``{session_id}~side``): the trajectory
  is the id without the suffix (``routing.session_key``) and the call's line is the turn
  number, so a retried attempt gets the same line as the one it replaces;
- any other id is its own trajectory, its successive calls taking lines 0, 1, ...

A trajectory that asks for more lines than the file has gets a ``BackendError`` naming the
file, its length and the trajectory. Weights are never used: ``update_weights`` only counts
the version, ``verify_weights`` checks nothing and returns 0.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.rollout.backends.base import BackendError, GenerationOutput
from agentrl.rollout.backends.registry import BACKEND_PLUGINS, BackendPlugin

logger = logging.getLogger(__name__)

REPLIES_KEY = "actor_rollout_ref.rollout.engine_kwargs.replies"
_CALL = re.compile(r"^(?P<trajectory>.*)-t(?P<turn>\d+)-a\d+$")


def read_replies(path: str | Path) -> list[str]:
    """The assistant texts of a replies file (the module docstring); a ``ValueError`` names
    the file and line of anything else."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{REPLIES_KEY}: no file {str(path)!r}")
    replies = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: not JSON ({err})") from err
        if isinstance(value, dict):
            value = value.get("text")
        if not isinstance(value, str):
            raise ValueError(f"{path}:{number}: a reply must be a JSON string or an object "
                             "with a string 'text'")
        replies.append(value)
    if not replies:
        raise ValueError(f"{REPLIES_KEY}: {path} holds no replies")
    return replies


class ScriptedBackend:
    """A ``GenerationBackend`` answering each trajectory's k-th call with ``replies[k]``
    (module docstring). ``outputs`` records every answer: ``(call id, output ids)``."""

    weight_sync = "state_dict"

    def __init__(self, replies: list[str], tokenizer: Any, source: str = "replies") -> None:
        if not replies:
            raise ValueError("ScriptedBackend needs at least one reply")
        self.replies = list(replies)
        self.tokenizer = tokenizer
        self.source = source
        self.weight_version = 0
        self.outputs: list[tuple[str, list[int]]] = []
        self._calls: Counter[str] = Counter()  # calls so far of ids without a turn

    @classmethod
    def from_file(cls, path: str | Path, tokenizer: Any) -> ScriptedBackend:
        return cls(read_replies(path), tokenizer, source=str(path))

    def line_of(self, request_id: str) -> tuple[str, int]:
        """The trajectory of a call id and the reply line it gets."""
        match = _CALL.match(request_id)
        if match is not None:
            return match["trajectory"], int(match["turn"])
        line = self._calls[request_id]
        self._calls[request_id] += 1
        return request_id, line

    def output_ids(self, text: str, sampling_params: Mapping[str, Any]) -> list[int]:
        """The policy's output ids of a reply text (the module docstring)."""
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        stops = list(sampling_params.get("stop_token_ids") or [])
        if stops and (not ids or ids[-1] not in stops):
            ids.append(int(stops[0]))
        return ids

    async def generate(self, input_ids: list[int], sampling_params: dict[str, Any],
                       request_id: str) -> GenerationOutput:  # fmt: skip
        trajectory, line = self.line_of(request_id)
        if line >= len(self.replies):
            raise BackendError(f"scripted backend: trajectory {trajectory!r} asked for reply "
                               f"{line + 1} but {self.source} has {len(self.replies)}")
        ids = self.output_ids(self.replies[line], sampling_params)
        limit = int(sampling_params.get("max_new_tokens") or len(ids))
        finish = "length" if len(ids) > limit else "stop"
        ids = ids[:limit]
        self.outputs.append((request_id, ids))
        logger.debug("scripted backend: %s gets reply %d (%d tokens)", request_id, line, len(ids))
        return GenerationOutput(
            ids, self.tokenizer.decode(ids, skip_special_tokens=False), finish, [0.0] * len(ids),
            meta_info={"weight_version": str(self.weight_version), "reply": line},
        )  # fmt: skip

    async def abort(self, request_id: str) -> None:
        """Nothing runs long enough to abort."""

    async def update_weights(self, source: Any, weight_version: str | None = None) -> None:
        """The weights are not used: only the version moves."""
        self.weight_version = (int(weight_version) if weight_version is not None
                               else self.weight_version + 1)

    async def verify_weights(self, source: Any) -> int:
        """No weights to check: 0 engines verified."""
        return 0

    async def release_memory(self) -> None:
        """Holds no accelerator memory."""

    async def resume_memory(self) -> None:
        """Holds no accelerator memory."""


@BACKEND_PLUGINS.register("scripted")
class ScriptedPlugin(BackendPlugin):
    """``rollout.name: scripted``: a ``ScriptedBackend`` of ``engine_kwargs.replies``."""

    name = "scripted"

    def config_problems(self, rollout: Mapping[str, Any]) -> list[str]:
        kwargs = dict(rollout.get("engine_kwargs") or {})
        unknown = sorted(set(kwargs) - {"replies"})
        problems = [f"actor_rollout_ref.rollout.engine_kwargs has {', '.join(unknown)}: the "
                    "scripted backend takes only replies"] if unknown else []
        if not kwargs.get("replies"):
            problems.append(f"{REPLIES_KEY} is required by rollout.name=scripted: the JSONL "
                            "file of assistant texts")
        elif not Path(str(kwargs["replies"])).is_file():
            problems.append(f"{REPLIES_KEY} is {str(kwargs['replies'])!r}: no such file")
        if rollout.get("server_urls"):
            problems.append("actor_rollout_ref.rollout.server_urls must be empty for "
                            "rollout.name=scripted: it has no servers")
        return problems

    def create(self, rollout: Mapping[str, Any], model_path: str | None, tokenizer: Any, *,
               model: Any = None, seed: int | None = None, gpus: Any = None) -> Any:  # fmt: skip
        problems = self.config_problems(rollout)
        if problems:
            raise ValueError("; ".join(problems))
        return ScriptedBackend.from_file(rollout["engine_kwargs"]["replies"], tokenizer)


__all__ = ["REPLIES_KEY", "ScriptedBackend", "ScriptedPlugin", "read_replies"]
