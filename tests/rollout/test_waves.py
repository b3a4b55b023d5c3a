"""Generation in waves (rollout.deterministic): requests go only when every live request
waits, in request order, also the one whose arrival completes the wave; leaving releases."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from agentrl.rollout import AsyncRolloutEngine
from agentrl.rollout.waves import GenerationWaves
from agentrl.testing.rollout import ConversationScriptBackend, rollout_config


def _req(i: int, offset: int = 0) -> SimpleNamespace:
    return SimpleNamespace(batch_data_id=i, rollout_offset=offset)


def test_a_wave_goes_when_all_live_requests_wait_in_request_order():
    async def main() -> tuple[list[int], int]:
        waves, order = GenerationWaves(live=4), []

        async def one(i: int, delay: float) -> None:
            await asyncio.sleep(delay)
            await waves.turn(_req(i))
            order.append(i)

        # arrivals 2, 0, 3; 1 leaves without generating; 3 arrives last and completes the wave
        tasks = [asyncio.create_task(one(i, d)) for i, d in ((2, 0.0), (0, 0.01), (3, 0.03))]
        await asyncio.sleep(0.02)
        assert order == []  # 1 is live and not waiting: nobody goes
        waves.leave(_req(1))
        assert order == []  # 3 is still live
        await asyncio.gather(*tasks)
        return order, waves.waves

    order, count = asyncio.run(main())
    assert order == [0, 2, 3] and count == 1


def test_leaving_releases_the_waiting_and_double_waiting_is_an_error():
    async def main() -> list[int]:
        waves, order = GenerationWaves(live=3), []

        async def one(i: int) -> None:
            await waves.turn(_req(i))
            order.append(i)

        tasks = [asyncio.create_task(one(i)) for i in (1, 0)]
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="already waiting"):
            await waves.turn(_req(1))
        waves.leave(_req(2))  # the last live request that did not wait
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == [0, 1]


def test_the_engine_generates_in_waves_with_the_hf_backend_by_default(tiny_tokenizer):
    scripted = ConversationScriptBackend(tiny_tokenizer, {})
    hf_like = type("HFLike", (ConversationScriptBackend,), {"deterministic_by_default": True})(
        tiny_tokenizer, {}
    )
    cfg = rollout_config()
    assert cfg.deterministic is None
    assert not AsyncRolloutEngine(cfg, tiny_tokenizer, scripted).deterministic
    assert AsyncRolloutEngine(cfg, tiny_tokenizer, hf_like).deterministic
    off, on = rollout_config("deterministic=false"), rollout_config("deterministic=true")
    assert not AsyncRolloutEngine(off, tiny_tokenizer, hf_like).deterministic
    assert AsyncRolloutEngine(on, tiny_tokenizer, scripted).deterministic
