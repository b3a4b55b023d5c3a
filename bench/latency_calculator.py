"""The quickstart's calculator with heavy-tailed latency (bench/async_vs_sync.py): each call
waits a lognormal time (median 200 ms, sigma 1, capped at 3 s) before it answers, like a
search or sandbox call whose slowest few hold up a synchronous batch."""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

from tools.calculator import CalculatorTool

MEDIAN_S, SIGMA, CAP_S = 0.2, 1.0, 3.0


def latency_s(rng: random.Random) -> float:
    """One draw: lognormal with median MEDIAN_S and shape SIGMA, capped at CAP_S."""
    return min(rng.lognormvariate(math.log(MEDIAN_S), SIGMA), CAP_S)


class LatencyCalculatorTool(CalculatorTool):
    def __init__(self, config: dict, tool_schema: Any = None) -> None:
        config = dict(config)
        self._rng = random.Random(int(config.pop("latency_seed", 0)))
        super().__init__(config, tool_schema)

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        await asyncio.sleep(latency_s(self._rng))
        return await super().execute(instance_id, parameters, **kwargs)
