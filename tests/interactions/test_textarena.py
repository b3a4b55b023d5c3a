"""TextArenaInteraction against the real TextArena: the reply's move reaches the game, the
game's news is the next user turn, its reward ends the trajectory; bad games fail loudly."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import re
import time

import pytest

pytest.importorskip("textarena")

from agentrl.interactions.textarena import (  # noqa: E402
    TextArenaInteraction,
    game_reward,
    make_game,
)

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


# Countdown, Cryptarithm and Slitherlink (0.7.4) call set_invalid_move(progress, message):
# lost by invalid moves, they close with the message as the reward
SWAPPED = {"Countdown-v0": 0.568, "Cryptarithm-v0": 0.0, "Slitherlink-v0": 0.0}
MOVES = ["[1]", "[a]", "[up]", "[e]", "[2 3]", "[hit]", "[A1]", "hello", "[0]", "[3]"]
# single-player games that play here with nothing more installed (0.7.4, one id each)
PLAYABLE = {"2048-v0", "Bandit-v0", "Blackjack-v0", "Countdown-v0", "Crosswords-v0",
            "Cryptarithm-v0", "FifteenPuzzle-v0", "FrozenLake-v0", "GuessTheNumber-v0",
            "LightsOut-v0", "LogicPuzzle-v0", "Mastermind-v0", "Minesweeper-v0", "PegJump-v0",
            "RushHour-v0", "Secretary-v0", "Set-v0", "Slitherlink-v0", "Sokoban-v0",
            "Sudoku-v0", "ThreeCardMonte-v0", "TowerOfHanoi-v0"}
REASONS = ("cannot be reset for one player", "is not a single-player game", "nltk corpus",
           "does not compile on Python", "cannot be made here", "unrendered")


def _play_to_the_end(game):
    for i in range(150):
        done, _, reward = game.play(MOVES[i % len(MOVES)])
        if done:
            return reward
    return None


@pytest.mark.parametrize("game_id", sorted(SWAPPED))
def test_a_game_lost_by_invalid_moves_is_scored_not_an_interaction_error(game_id):
    interaction = TextArenaInteraction({"name": "textarena"})
    instance = asyncio.run(interaction.start_interaction(None, env_id=game_id, seed=0))
    outcomes = _play(interaction, instance, ["<answer>nonsense</answer>"] * 3)
    assert outcomes[-1][0] is True
    assert outcomes[-1][2] == pytest.approx(SWAPPED[game_id], abs=1e-3)
    assert isinstance(interaction._instance_dict[instance]["game"].env.state.rewards[0], str)


def test_game_reward_reads_every_form_close_returns(caplog):
    info = {0: {"reason": "Invalid Move: 0.25"}}
    assert game_reward(({0: 0.5}, info)) == 0.5 and game_reward({0: 1}) == 1.0
    assert game_reward((None, {})) == 0.0 and game_reward(({0: "0.75"}, {})) == 0.75
    assert game_reward(({0: "Bad action format."}, info)) == 0.25  # swapped arguments
    assert game_reward(0.5) == 0.5 and game_reward(({1: 1.0}, {})) == 0.0
    with caplog.at_level(logging.WARNING, logger="agentrl.interactions.textarena"):
        assert game_reward(({0: "Bad action format."}, {0: {"reason": "oops"}})) == 0.0
    assert "not a number; scored 0.0" in caplog.text


def test_every_game_plays_to_its_own_reward_or_is_refused_with_the_reason(monkeypatch):
    """One id of each of TextArena's 96 games (a few seconds): a single-player game plays
    junk moves to its end and its reward is the one the game set; any other is refused at
    make time, naming the game and why."""
    import nltk
    from textarena.envs.registration import ENV_REGISTRY

    monkeypatch.setattr(nltk, "download", lambda *a, **k: False)  # no network from a test
    first = {}
    for env_id in ENV_REGISTRY:
        base = re.sub(r"-v\d.*", "", env_id)
        if base not in first or len(env_id) < len(first[base]):
            first[base] = env_id
    played = set()
    for env_id in sorted(first.values()):
        try:
            game = make_game(env_id, 0)[0]
        except ValueError as err:
            assert str(err).startswith(f"textarena:{env_id}") and any(
                r in str(err) for r in REASONS), str(err)
            continue
        reward = _play_to_the_end(game)
        own = SWAPPED.get(env_id, game.env.state.rewards[0])  # swapped: the progress
        assert reward == pytest.approx(float(own), abs=1e-3), env_id
        played.add(env_id)
    assert played >= PLAYABLE and len(first) == 96


def test_a_raw_id_is_refused_with_the_id_to_use():
    with pytest.raises(ValueError, match=r"textarena:GuessTheNumber-v0-raw: .*not text.*use "
                                         r"the id without -raw"):
        make_game("GuessTheNumber-v0-raw", 0)
