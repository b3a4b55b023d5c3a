"""A calculator whose `create` never returns (tests/trainer/test_async_trainer.py: the hang
watchdog must name the stage and show this coroutine's stack)."""

from __future__ import annotations

import asyncio
from typing import Any

from tools.calculator import CalculatorTool


class HangingCalculatorTool(CalculatorTool):
    async def create(self, instance_id: str | None = None, **kwargs: Any):
        return await hang_forever_in_create()


async def hang_forever_in_create() -> None:
    await asyncio.Event().wait()
