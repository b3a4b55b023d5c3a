"""OpenEnvInteraction against a real OpenEnv server (openenv-core's `create_app`, started here
in a child process): each trajectory its own episode, the move the action, the step's
reward and done the turn's score and end; a server that raises, hangs or answers with a
malformed observation fails that trajectory with the reason."""

from __future__ import annotations

import asyncio
import random
import re
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv.core")

from agentrl.interactions.openenv import (  # noqa: E402
    OpenEnvInteraction,
    infer_fields,
    parse_step,
    read_schemas,
    text_field,
)
from agentrl.interactions.openenv_server import start_server  # noqa: E402
from agentrl.interactions.testing import check_interaction_contract  # noqa: E402

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def server():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(HERE))  # the child imports openenv_guess_env from here
        mp.setenv("PYTHONPATH", str(HERE))
        process = start_server("openenv_guess_env")
    yield process.base_url
    process.stop()


def _interaction(url, **config):
    return OpenEnvInteraction({"name": "openenv", "server": url, "action_field": "guess",
                               "observation_field": "message", **config})


def _reply(guess):
    return [{"role": "assistant", "content": f"Let me think. <answer>{guess}</answer>"}]


async def _binary_search(interaction, seed):
    """Plays one episode by the hints; returns [(done, text, score)] of every turn."""
    instance = await interaction.start_interaction(f"episode-{seed}", seed=seed)
    low, high, turns = 1, 20, []
    for _ in range(8):
        guess = (low + high) // 2
        done, text, score, _ = await interaction.generate_response(instance, _reply(guess))
        turns.append((done, text, score))
        if done:
            break
        low, high = (guess + 1, high) if "higher" in text else (low, guess - 1)
    await interaction.finalize_interaction(instance)
    return turns


def test_concurrent_episodes_map_reward_and_done(server):
    interaction = _interaction(server)
    seeds = [1, 2, 3, 4, 5]

    async def play():
        return await asyncio.gather(*(_binary_search(interaction, s) for s in seeds))

    for seed, turns in zip(seeds, asyncio.run(play()), strict=True):
        target = random.Random(seed).randint(1, 20)  # the env's own draw
        assert turns[-1] == (True, "Correct!", 1.0), (seed, target, turns)
        assert [t[:1] + t[2:] for t in turns[:-1]] == [(False, -0.1)] * (len(turns) - 1)
        assert all(re.fullmatch(r"\d+ is wrong: go (higher|lower)\.", t[1]) for t in turns[:-1])
    assert interaction._instance_dict == {}


def test_an_invalid_move_is_the_environments_to_answer_and_the_episode_goes_on(server):
    interaction = _interaction(server)

    async def play():
        instance = await interaction.start_interaction("x", seed=7)
        out = [await interaction.generate_response(instance, _reply(g)) for g in ("seven", "7")]
        await interaction.finalize_interaction(instance)
        return out

    invalid, valid = asyncio.run(play())
    assert invalid[:3] == (False, "'seven' is not a number.", 0.0)
    assert valid[:3] == (False, "7 is wrong: go higher.", -0.1)  # seed 7's number is 11


def test_json_actions_are_checked_against_the_environments_schema(server):
    interaction = _interaction(server, action_field=None)

    async def play():
        instance = await interaction.start_interaction("j", seed=0)
        out = [await interaction.generate_response(instance, _reply(m))
               for m in ("ten", '{"guess": 10}', '{"guess": "10"}')]
        await interaction.finalize_interaction(instance)
        return out

    not_json, wrong_type, right = asyncio.run(play())
    assert not_json[:3] == (False, "Invalid action: not JSON (Expecting value: line 1 column 1 "
                                   "(char 0)).", 0.0)
    assert wrong_type[:3] == (False, "Invalid action: 10 is not of type 'string'.", 0.0)
    assert right[:3] == (False, "10 is wrong: go higher.", -0.1)  # seed 0's number is 13


def _step_raises(interaction, guess, instance="bad"):
    async def play():
        await interaction.start_interaction(instance, seed=1)
        try:
            await interaction.generate_response(instance, _reply(guess))
        finally:
            await interaction.finalize_interaction(instance)

    asyncio.run(play())


def test_a_server_that_raises_fails_the_trajectory_with_its_reason(server):
    interaction = _interaction(server)
    with pytest.raises(RuntimeError, match="the number machine broke"):
        _step_raises(interaction, "raise")
    assert interaction._instance_dict == {}
    assert asyncio.run(_binary_search(interaction, 2))[-1][0] is True  # the server goes on


def test_a_hanging_server_times_out(server):
    interaction = _interaction(server, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        _step_raises(interaction, "hang")
    assert time.monotonic() - started < 10


def test_an_observation_without_its_text_is_malformed(server):
    with pytest.raises(ValueError, match="malformed observation.*'message' is NoneType"):
        _step_raises(_interaction(server), "garble")


@pytest.mark.parametrize(("payload", "why"), [
    ("nope", "expected"),
    ({"observation": "text", "done": False}, "expected"),
    ({"observation": {}, "done": "yes"}, "done is 'yes'"),
    ({"observation": {}, "done": False, "reward": "high"}, "reward is 'high'"),
    ({"observation": {}, "done": False, "reward": float("nan")}, "reward is nan"),
])
def test_malformed_answers_are_named(payload, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        parse_step(payload)


def test_a_well_formed_answer_parses():
    step = parse_step({"observation": {"message": "hi"}, "reward": True, "done": True})
    assert (step.observation, step.reward, step.done) == ({"message": "hi"}, 1.0, True)


def test_the_text_fields_are_read_from_the_servers_schema(server):
    assert infer_fields(read_schemas(server, 10)) == ("guess", "message")
    two = {"properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    number = {"properties": {"n": {"type": "integer"}, "metadata": {"type": "object"}}}
    assert text_field(two, set()) is None and text_field(number, {"metadata"}) is None


def test_the_contract_check_passes(server):
    report = asyncio.run(check_interaction_contract(
        _interaction(server), _reply(10), {"name": "openenv", "seed": 3}))
    assert (report.should_terminate, report.response, report.score) == (
        False, "10 is wrong: go lower.", -0.1)  # seed 3's number is 8


def test_a_module_server_starts_with_the_interaction_and_stops(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    interaction = OpenEnvInteraction({"server": "openenv_guess_env", "action_field": "guess",
                                      "observation_field": "message"})
    process = interaction._process
    assert interaction.base_url.startswith("http://127.0.0.1:")
    assert asyncio.run(_binary_search(interaction, 9))[-1] == (True, "Correct!", 1.0)
    interaction.stop_server()
    assert process.process.poll() is not None


def test_bad_config_and_a_missing_package_are_named(monkeypatch):
    with pytest.raises(ValueError, match="config.server"):
        OpenEnvInteraction({})
    monkeypatch.setitem(sys.modules, "openenv.core.env_client", None)
    interaction = _interaction("http://127.0.0.1:9")
    interaction._action_schema = {}
    with pytest.raises(ImportError, match=r"pip install 'agentrl\[envs\]'"):
        asyncio.run(interaction.start_interaction("m", seed=0))
