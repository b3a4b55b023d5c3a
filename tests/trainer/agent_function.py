"""An agent function for the agent-mode trainer test: one chat call per sample, rewarded by
the share of vowels; the prompt of row 1 raises, row 2 hangs (both must fail alone)."""

from __future__ import annotations

import asyncio


async def run(task, client):
    index = int(task["extra_info"]["index"])
    if index == 1:
        raise RuntimeError("the agent's own tool failed")
    if index == 2:
        await asyncio.sleep(60)
    reply = await client.chat.completions.create(
        model="policy", messages=list(task["raw_prompt"]), max_tokens=8)
    text = reply.choices[0].message.content or ""
    return sum(c in "aeiou" for c in text.lower()) / max(len(text), 1)
