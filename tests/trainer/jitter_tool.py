"""A calculator that answers after a random delay from the OS's entropy (not seedable): it
scrambles when requests come back from their tool calls (tests/trainer/test_determinism.py)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from tools.calculator import CalculatorTool


class JitterCalculatorTool(CalculatorTool):
    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        await asyncio.sleep(random.SystemRandom().uniform(0.0, 0.03))
        return await super().execute(instance_id, parameters, **kwargs)
