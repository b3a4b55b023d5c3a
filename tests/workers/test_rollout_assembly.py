"""build_rollout: the one place a rollout's engine kind is chosen, from its typed
RolloutSettings alone, over the configured or a given backend."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from agentrl.config import load_config
from agentrl.testing.rollout import (
    PROMPT_LENGTH,
    RESPONSE_LENGTH,
    ConversationScriptBackend,
    prompts_batch,
)
from agentrl.utils.aio import LoopThread
from agentrl.utils.plain_config import PlainConfig
from agentrl.workers.rollout_assembly import ENGINE_KINDS, build_rollout, engine_kind
from agentrl.workers.rollout_settings import RolloutSettings

FIXTURES = Path(__file__).parent.parent / "fixtures"
ENGINE = f"{FIXTURES / 'counting_engine.py'}:CountingEngine"
SCRIPTS = {0: ["4<|im_end|>"], 1: ["5<|im_end|>"]}


def _actor_rollout_ref(*overrides: str):
    return load_config(overrides=[
        f"data.max_prompt_length={PROMPT_LENGTH}", f"data.max_response_length={RESPONSE_LENGTH}",
        *[f"actor_rollout_ref.rollout.{o}" for o in overrides],
    ]).actor_rollout_ref  # fmt: skip


def _settings(*overrides: str) -> RolloutSettings:
    return RolloutSettings.from_config(_actor_rollout_ref(*overrides))


async def answer_agent(task, client):
    """An agent that asks the model once and scores the reply by its first digit."""
    reply = await client.chat.completions.create(model="policy", messages=task["raw_prompt"])
    return float(bool(re.match(r"\d", reply.choices[0].message.content)))


class _ClosableBackend(ConversationScriptBackend):
    closed = False

    async def aclose(self):
        self.closed = True


@pytest.mark.parametrize(("overrides", "kind"), [
    ((), "engine"),
    (("engine_class=a.py:E",), "engine"),
    (("engine_workers=2", "name=sglang"), "sharded"),
    (("agent_function=a.py:run",), "agent"),
])  # fmt: skip
def test_the_kind_comes_from_the_config_alone(overrides, kind):
    rollout = _actor_rollout_ref(*overrides).rollout
    assert engine_kind(rollout) == kind and kind in ENGINE_KINDS
    assert _settings(*overrides).kind == kind


def test_a_users_engine_runs_on_the_callers_loop_over_a_given_backend(tiny_tokenizer):
    backend = _ClosableBackend(tiny_tokenizer, SCRIPTS)
    loop = LoopThread()
    try:
        rollout = build_rollout(_settings(f"engine_class={ENGINE}"), tiny_tokenizer,
                                loop=loop, backend=backend)
        assert rollout.engine_kind == "engine" and type(rollout.engine).__name__ == "CountingEngine"
        assert isinstance(rollout.settings, RolloutSettings)
        # a user's engine reads its own keys as attributes (`self.config`, engine.py)
        assert isinstance(rollout.engine.config.multi_turn, PlainConfig)
        before = type(rollout.engine).requests_run
        out = rollout.generate_sequences(prompts_batch(2))
        assert len(out) == 2 * rollout.settings.engine.sampling.n
        assert type(rollout.engine).requests_run - before == len(out)
        rollout.close()
        assert not backend.closed  # a backend the caller gave stays the caller's
    finally:
        loop.close()


def test_agent_mode_is_built_from_the_agent_function_and_reports_each_sample(tiny_tokenizer):
    rollout = build_rollout(
        _settings(f"agent_function={Path(__file__)}:answer_agent", "n=1"),
        tiny_tokenizer, backend=ConversationScriptBackend(tiny_tokenizer, {0: ["4<|im_end|>"],
                                                                 1: ["no<|im_end|>"]}),
    )  # fmt: skip
    assert rollout.engine_kind == "agent" and type(rollout.engine).__name__ == "AgentRollout"
    done: list = []
    out = asyncio.run(rollout.agenerate_sequences(prompts_batch(2), on_request_done=done.append))
    assert out.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.0]
    assert len(done) == 2 and {r.batch_data_id for r in done} == {0, 1}


def test_a_sharded_rollout_needs_http_servers(tiny_tokenizer):
    with pytest.raises(ValueError, match="engine_workers > 1 needs a backend with inference servers"):
        build_rollout(_settings("engine_workers=2", "name=sglang"), tiny_tokenizer,
                      backend=ConversationScriptBackend(tiny_tokenizer, {}))



class _CountingBackend(ConversationScriptBackend):
    """A backend that counts like the SGLang client (metrics since the last reading)."""

    retries = 0

    def metrics(self):
        counted, type(self).retries = type(self).retries, 0
        return {"rollout/server_retries": float(counted), "rollout/servers_alive": 2.0}


def test_the_backends_own_counts_reach_the_batch_metrics(tiny_tokenizer):
    backend = _CountingBackend(tiny_tokenizer, SCRIPTS)
    rollout = build_rollout(_settings("n=1"), tiny_tokenizer, backend=backend)
    _CountingBackend.retries = 3
    out = asyncio.run(rollout.agenerate_sequences(prompts_batch(2)))
    assert out.meta_info["metrics"]["rollout/server_retries"] == 3.0
    assert out.meta_info["metrics"]["rollout/servers_alive"] == 2.0
    assert out.meta_info["metrics"]["rollout/requests"] == 2.0  # the engine's own are kept
    again = asyncio.run(rollout.agenerate_sequences(prompts_batch(2)))
    assert again.meta_info["metrics"]["rollout/server_retries"] == 0.0  # counted once


def test_build_rollout_takes_only_the_typed_settings(tiny_tokenizer):
    with pytest.raises(TypeError, match=r"RolloutSettings\.from_config\(actor_rollout_ref\)"):
        build_rollout(_actor_rollout_ref(), tiny_tokenizer,
                      backend=ConversationScriptBackend(tiny_tokenizer, {}))
