"""Record every tool response of a run to a file, and replay them in a later run.

With ``wrap_tools(tools, "record", path)`` each tool is wrapped in a ``RecordReplayTool``
that appends one JSON line per ``create``, ``execute`` and ``calc_reward`` to ``path``.
With ``"replay"`` the wrapped tools answer from that file and never call the real tool, so
a rollout re-runs deterministically without the search service or the sandbox.

Replay keys (canonical JSON, sorted keys):

    create       (tool, create_kwargs)                         -> response text
    execute      (tool, create_kwargs, arguments)              -> response text, reward, metrics
    calc_reward  (tool, create_kwargs, arguments of the instance's calls in order,
                  calc_reward_kwargs)                          -> reward

The first recording of a key wins. A missed ``execute`` answers with an error text naming
the tool and the arguments (``metrics["tool_error"] = "replay_miss"``); a missed ``create``
answers an empty response and a missed ``calc_reward`` 0.0, both logged as warnings.
Only returned values are recorded: a call that raised or timed out replays as a miss.
Record mode appends, so several processes (or runs) can share one file.

Config: ``actor_rollout_ref.rollout.multi_turn.tool_record_mode`` (null | record | replay)
and ``.tool_record_path``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from uuid import uuid4

from agentrl.tools.base import BaseTool
from agentrl.tools.execution import conform_result
from agentrl.tools.schemas import ToolResponse
from agentrl.utils.jsonl import json_default

logger = logging.getLogger(__name__)

MODES = (None, "record", "replay")


def canonical_json(obj: Any) -> str:
    """The canonical JSON text of ``obj``: sorted keys, no spaces, numpy made plain."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=json_default
    )


def _key(kind: str, record: dict[str, Any]) -> str:
    if kind == "create":
        parts = [kind, record["tool"], record["create_kwargs"]]
    elif kind == "execute":
        parts = [kind, record["tool"], record["create_kwargs"], record["arguments"]]
    elif kind == "calc_reward":
        parts = [kind, record["tool"], record["create_kwargs"], record["calls"], record["kwargs"]]
    else:
        raise ValueError(f"unknown record kind {kind!r}")
    return canonical_json(parts)


class ToolRecording:
    """The file of one recording: appends in record mode, a lookup table in replay mode."""

    def __init__(self, path: str | Path, mode: str) -> None:
        if mode not in ("record", "replay"):
            raise ValueError(f"tool record mode must be 'record' or 'replay', got {mode!r}")
        self.path = Path(path)
        self.mode = mode
        self._table: dict[str, dict[str, Any]] = {}
        if mode == "replay":
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def _load(self) -> None:
        if not self.path.is_file():
            raise FileNotFoundError(f"tool replay file not found: {self.path}")
        with self.path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    key = _key(record["kind"], record)
                except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                    raise ValueError(
                        f"{self.path}:{lineno}: not a tool recording line ({err})"
                    ) from err
                self._table.setdefault(key, record)
        logger.info("loaded %d recorded tool responses from %s", len(self._table), self.path)

    def append(self, record: dict[str, Any]) -> None:
        line = canonical_json(record) + "\n"
        # One write of one line per call, in append mode: lines from concurrent
        # coroutines (one thread) or processes do not interleave.
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line)

    def lookup(self, kind: str, record: dict[str, Any]) -> dict[str, Any] | None:
        return self._table.get(_key(kind, record))


class RecordReplayTool(BaseTool):
    """Wraps a tool: records its answers, or replays them without calling it."""

    def __init__(self, tool: BaseTool, recording: ToolRecording) -> None:
        super().__init__(config=tool.config, tool_schema=tool.get_openai_tool_schema())
        self.inner = tool
        self.recording = recording

    @property
    def replaying(self) -> bool:
        return self.recording.mode == "replay"

    async def create(
        self, instance_id: str | None = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        record = {"kind": "create", "tool": self.name, "create_kwargs": kwargs}
        if self.replaying:
            instance_id = instance_id if instance_id is not None else str(uuid4())
            found = self.recording.lookup("create", record)
            if found is None:
                logger.warning(
                    "tool %r: no recorded create for %s", self.name, canonical_json(kwargs)
                )
            response = ToolResponse(text=found["response"] if found else None)
        else:
            instance_id, response = await self.inner.create(instance_id, **kwargs)
            self.recording.append({**record, "response": response.text})
        self._instance_dict[instance_id] = {"create_kwargs": kwargs, "calls": []}
        return instance_id, response

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        state = self._instance_dict.setdefault(instance_id, {"create_kwargs": {}, "calls": []})
        state["calls"].append(parameters)
        record = {
            "kind": "execute",
            "tool": self.name,
            "create_kwargs": state["create_kwargs"],
            "arguments": parameters,
        }
        if self.replaying:
            found = self.recording.lookup("execute", record)
            if found is None:
                text = (
                    f"Error: no recorded response of tool '{self.name}' for arguments "
                    f"{canonical_json(parameters)}"
                )
                return ToolResponse(text=text), 0.0, {"tool_error": "replay_miss"}
            return (
                ToolResponse(text=found["response"]),
                float(found["reward"]),
                dict(found["metrics"]),
            )
        result = await self.inner.execute(instance_id, parameters, **kwargs)
        conformed = conform_result(result)
        if conformed is None:  # left for execute_tool_call to report; nothing to record
            return result
        response, reward, metrics = conformed
        self.recording.append(
            {**record, "response": response.text, "reward": reward, "metrics": metrics}
        )
        return conformed

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        state = self._instance_dict.get(instance_id, {"create_kwargs": {}, "calls": []})
        record = {
            "kind": "calc_reward",
            "tool": self.name,
            "create_kwargs": state["create_kwargs"],
            "calls": state["calls"],
            "kwargs": kwargs,
        }
        if self.replaying:
            found = self.recording.lookup("calc_reward", record)
            if found is None:
                logger.warning("tool %r: no recorded calc_reward, using 0.0", self.name)
                return 0.0
            return float(found["reward"])
        reward = await self.inner.calc_reward(instance_id, **kwargs)
        self.recording.append({**record, "reward": reward})
        return reward

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instance_dict.pop(instance_id, None)
        if not self.replaying:
            await self.inner.release(instance_id, **kwargs)


def wrap_tools(
    tools: dict[str, BaseTool], mode: str | None, path: str | Path | None
) -> dict[str, BaseTool]:
    """Wrap every tool for recording or replay; ``mode=None`` returns ``tools`` unchanged."""
    if mode not in MODES:
        raise ValueError(f"tool_record_mode must be one of {list(MODES)}, got {mode!r}")
    if mode is None:
        return tools
    if path is None:
        raise ValueError(f"tool_record_mode={mode!r} needs tool_record_path to be set")
    recording = ToolRecording(path, mode)
    return {name: RecordReplayTool(tool, recording) for name, tool in tools.items()}
