"""TextArenaInteraction against the real TextArena: the reply's move reaches the game, the
game's news is the next user turn, its reward ends the trajectory; bad games fail loudly."""

from __future__ import annotations

import asyncio
import re

import pytest

pytest.importorskip("textarena")

from agentrl.interactions.textarena import TextArenaInteraction, make_game  # noqa: E402

GAME = "GuessTheNumber-v0"


def _play(interaction, instance, replies):
    async def go():
        outcomes = []
        for reply in replies:
            messages = [{"role": "assistant", "content": reply}]
            outcomes.append(await interaction.generate_response(instance, messages))
            if outcomes[-1][0]:
                break
        return outcomes

    return asyncio.run(go())


def test_binary_search_wins_with_the_games_reward():
    interaction = TextArenaInteraction({"name": "textarena"})
    instance = asyncio.run(interaction.start_interaction(None, env_id=GAME, seed=5))
    low, high, outcomes = 1, 20, []
    for _ in range(10):
        guess = (low + high) // 2
        (done, text, score, _), = _play(interaction, instance, [f"<answer>[{guess}]</answer>"])
        outcomes.append((done, score))
        if done:
            break
        assert "[GAME]" in text and "You are Player 0" not in text  # only what is new
        if re.search(r"higher", text, re.I):
            low = guess + 1
        else:
            high = guess - 1
    assert outcomes[-1] == (True, 1.0) and all(s == 0.0 for _, s in outcomes[:-1])
    asyncio.run(interaction.finalize_interaction(instance))
    assert interaction._instance_dict == {}


def test_an_invalid_move_is_the_games_to_answer_and_the_game_goes_on():
    interaction = TextArenaInteraction({"name": "textarena"})
    instance = asyncio.run(interaction.start_interaction(None, env_id=GAME, seed=5))
    ((done, text, score, _),) = _play(interaction, instance, ["I have no idea"])
    assert not done and score == 0.0 and "invalid move" in text.lower()
    asyncio.run(interaction.finalize_interaction(instance))


def test_the_move_is_the_tag_text_or_the_whole_reply():
    assert TextArenaInteraction({}).move("think... <answer>[3]</answer>") == "[3]"
    assert TextArenaInteraction({}).move("  [4] ") == "[4]"
    assert TextArenaInteraction({"answer_tag": None}).move("<answer>[3]</answer>") == (
        "<answer>[3]</answer>")


def test_the_same_seed_is_the_same_game():
    (_, first), (_, again) = make_game(GAME, 9), make_game(GAME, 9)
    assert first == again


def test_bad_rows_and_unknown_games_are_named():
    interaction = TextArenaInteraction({})
    with pytest.raises(ValueError, match="interaction_kwargs.seed"):
        asyncio.run(interaction.start_interaction(None, env_id=GAME))
    with pytest.raises(ValueError, match="textarena:Nope-v0"):
        make_game("Nope-v0", 0)


def test_an_observation_that_is_not_text_fails(monkeypatch):
    interaction = TextArenaInteraction({})
    instance = asyncio.run(interaction.start_interaction(None, env_id=GAME, seed=1))
    env = interaction._instance_dict[instance]["env"]
    monkeypatch.setattr(env, "get_observation", lambda: (0, {"board": 1}))
    with pytest.raises(ValueError, match="not text"):
        _play(interaction, instance, ["<answer>[10]</answer>"])
