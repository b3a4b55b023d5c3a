"""The hf engine timed on identical micro-batches (bench/kv_cache.py,
bench/decode_attention.py): a process's first generation is what a trainer's first step
pays, the later ones are steady."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any


def random_prompts(rows: int, vocab: int, seed: int) -> list[list[int]]:
    """`rows` prompts of 8-63 token ids drawn from [10, vocab), the same for a seed."""
    import torch

    rng = torch.Generator().manual_seed(seed)
    return [
        torch.randint(10, vocab, (int(torch.randint(8, 64, (1,), generator=rng)),),
                      generator=rng).tolist()
        for _ in range(rows)
    ]  # fmt: skip


def time_generations(backend: Any, prompts: list[list[int]], params: dict[str, Any],
                     generations: int) -> tuple[list[Any], dict[str, Any]]:  # fmt: skip
    """Run the prompts as one batch of requests `generations` (>= 2) times. Returns the last
    run's outputs and the seconds: `first_s`, `steady_s` (median of the later runs),
    `steady_s_range`, `first_ratio`, `seconds` (every run)."""

    async def generate() -> list[Any]:
        return await asyncio.gather(
            *(backend.generate(p, params, f"r{i}") for i, p in enumerate(prompts))
        )

    seconds, outputs = [], []
    for _ in range(generations):
        start = time.perf_counter()
        outputs = asyncio.run(generate())
        seconds.append(time.perf_counter() - start)
    steady = statistics.median(seconds[1:])
    return outputs, {
        "first_s": seconds[0],
        "steady_s": steady,
        "steady_s_range": [min(seconds[1:]), max(seconds[1:])],
        "first_ratio": seconds[0] / steady,
        "seconds": seconds,
    }
