"""TextArenaInteraction against the real TextArena: the reply's move reaches the game, the
game's news is the next user turn, its reward ends the trajectory; bad games fail loudly."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import re
import time

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
    env = interaction._instance_dict[instance]["game"].env
    monkeypatch.setattr(env, "get_observation", lambda: (0, {"board": 1}))
    with pytest.raises(ValueError, match="not text"):
        _play(interaction, instance, ["<answer>[10]</answer>"])


def _blackjack(seed, moves, between=None):
    """The texts of Blackjack game `seed` after each move; `between(i)` runs before move i."""
    game, first = make_game("Blackjack-v0", seed)
    texts = [first]
    for i, move in enumerate(moves):
        if between is not None:
            between(i)
        if game.step(move):
            texts.append(game.close())
            break
        texts.append(game.observation())
    return texts


def test_a_seed_and_its_moves_are_one_game_whatever_plays_beside_it():
    # TextArena's games draw cards from the process-wide `random`: each Game keeps its own
    moves = ["[Hit]", "[Stand]"] * 6
    alone = _blackjack(7, moves)
    others = [make_game("Blackjack-v0", s)[0] for s in (1, 2)]
    random.seed(123)
    outer = random.random()
    random.seed(123)
    beside = _blackjack(7, moves, between=lambda i: (others[i % 2].step("[Hit]"),
                                                     random.random()))
    assert beside == alone
    random.seed(123)
    assert random.random() == outer  # the process's stream is its own


def test_games_played_at_once_in_threads_are_the_games_played_alone():
    moves = ["[Hit]", "[Stand]", "[Stand]", "[Hit]", "[Stand]"] * 3
    alone = {seed: _blackjack(seed, moves) for seed in range(8)}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            together = dict(enumerate(pool.map(
                lambda s: _blackjack(s, moves, between=lambda i: time.sleep(0.001)), range(8))))
            assert together == alone
