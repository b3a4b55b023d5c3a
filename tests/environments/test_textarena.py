"""TextArena episodes as verl rows: one game per seed, train and test seeds apart and no
prompt in both (with allow_shared_prompts no game: a hidden setup counts), the interaction
config that replays them."""

from __future__ import annotations

import pytest

pytest.importorskip("textarena")

from agentrl.environments.textarena import (  # noqa: E402
    TEST_SEED_OFFSET,
    game_key,
    interaction_config,
    make_rows,
    prepare,
)
from agentrl.interactions.textarena import make_game  # noqa: E402


def test_each_row_is_the_first_observation_of_its_seeded_game():
    rows = make_rows("GuessTheNumber-v0", [3, 4], "train", answer_tag="move")
    assert [r["extra_info"]["interaction_kwargs"] for r in rows] == [
        {"name": "textarena", "env_id": "GuessTheNumber-v0", "seed": s} for s in (3, 4)]
    assert rows[0]["prompt"][1]["content"] == make_game("GuessTheNumber-v0", 3)[1]
    assert "<move></move>" in rows[0]["prompt"][0]["content"]
    assert rows[0]["data_source"] == "textarena/GuessTheNumber-v0"


def test_train_and_test_seeds_are_disjoint_and_the_config_names_the_interaction():
    train, test, extra = prepare("Blackjack-v0", 3, 2, seed=10)
    seeds = [r["extra_info"]["seed"] for r in train], [r["extra_info"]["seed"] for r in test]
    assert seeds == ([10, 11, 12], [TEST_SEED_OFFSET + 10, TEST_SEED_OFFSET + 11])
    assert extra == {"interaction": interaction_config()}
    entry = extra["interaction"]["interaction"][0]
    assert entry["class_name"] == "agentrl.interactions.textarena.TextArenaInteraction"
    with pytest.raises(ValueError, match="below 1000000"):
        prepare("Blackjack-v0", 10, 1, seed=TEST_SEED_OFFSET - 5)


def _number(env_id, seed):
    game, _ = make_game(env_id, seed)
    return game.env.state.game_state["game_number"]


def test_games_with_one_prompt_are_refused_or_with_the_flag_told_apart_by_their_setup():
    """GuessTheNumber shows every seed the same prompt: refused, naming the flag; with it its
    number tells its games apart, and a seed whose number an earlier row has is skipped."""
    with pytest.raises(ValueError, match=r"GuessTheNumber-v0: its prompt does not change with "
                                         r"the seed .*pass --allow-shared-prompts"):
        prepare("GuessTheNumber-v0", 3, 2, seed=2)
    train, test, _ = prepare("GuessTheNumber-v0", 3, 2, seed=2, allow_shared_prompts=True)
    numbers = {s: _number("GuessTheNumber-v0", s)
               for s in (2, 3, 4, 5, *(TEST_SEED_OFFSET + t for t in (2, 3, 4)))}
    # seed 4 draws seed 3's number, test seed 1_000_002 seed 2's: both skipped
    assert numbers[4] == numbers[3] and numbers[TEST_SEED_OFFSET + 2] == numbers[2]
    assert [r["extra_info"]["seed"] for r in train] == [2, 3, 5]
    assert [r["extra_info"]["seed"] for r in test] == [TEST_SEED_OFFSET + 3, TEST_SEED_OFFSET + 4]
    assert len({numbers[r["extra_info"]["seed"]] for r in train + test}) == 5
    assert len({r["prompt"][1]["content"] for r in train + test}) == 1
    with pytest.raises(ValueError, match=r"textarena:GuessTheNumber-v0: \d+ seeds gave 20 "
                                         r"distinct items.*ask for at most 20 in all"):
        prepare("GuessTheNumber-v0", 20, 1, seed=0, allow_shared_prompts=True)


def test_a_game_that_lays_its_setup_at_the_first_move_is_one_game_per_seed():
    keys = {game_key(*_made("Minesweeper-v0", s)) for s in (0, 1)}
    assert len(keys) == 2  # its state at reset is the same; its mines come from the seed


def _made(env_id, seed):
    game, first = make_game(env_id, seed)
    return game, first, seed


def test_games_that_ignore_their_seed_and_raw_ids_are_refused():
    with pytest.raises(ValueError, match="TowerOfHanoi-v0-hard: 26 seeds gave 1 distinct item: "
                                         "it ignores its seed"):
        prepare("TowerOfHanoi-v0-hard", 3, 2, seed=0)
    with pytest.raises(ValueError, match="a -raw id gives the game's messages unrendered"):
        prepare("Sudoku-v0-hard-raw", 1, 1, seed=0)
