"""The calculator agent (examples/agents/calculator_agent.py) with heavy-tailed tool latency
(bench/agent_async_vs_sync.py): after each model reply that calls the calculator the episode
waits a lognormal time (bench/latency_calculator.py: median 200 ms, sigma 1, capped at 3 s)
before the agent runs the call, like an agent whose search, sandbox or CLI tool is slow for a
few episodes and holds up a synchronous batch.

    actor_rollout_ref.rollout.agent_function=bench/latency_agent.py:run

The agent's own code is unchanged: it gets a client whose completions wait when the reply
holds tool calls.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench", ROOT / "examples" / "agents"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import calculator_agent  # noqa: E402
from latency_calculator import latency_s  # noqa: E402

_RNG = random.Random(0)  # one stream per process: every mode draws from the same law


class _Completions:
    def __init__(self, completions: Any) -> None:
        self._completions = completions

    async def create(self, **kwargs: Any) -> Any:
        reply = await self._completions.create(**kwargs)
        if reply.choices and reply.choices[0].message.tool_calls:
            await asyncio.sleep(latency_s(_RNG))  # the tool's time, seen by the episode
        return reply


class _Chat:
    def __init__(self, chat: Any) -> None:
        self.completions = _Completions(chat.completions)


class SlowToolClient:
    """``client`` whose ``chat.completions.create`` waits a tool's latency after a reply
    that calls a tool; everything else passes through."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.chat = _Chat(client.chat)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


async def run(task: dict[str, Any], client: Any) -> float:
    """The calculator agent's episode, its tool calls slowed."""
    return await calculator_agent.run(task, SlowToolClient(client))
