"""Train and test share no item: seeds that give a prompt an earlier row has are skipped
(with allow_shared_prompts, a game: prompt and hidden setup), an environment with too few
items is refused in one line, and every id `agentrl env prepare` accepts
(tests/environments/conftest.py) writes splits that share no prompt or is refused; the games
whose prompt hides their setup are refused naming --allow-shared-prompts, and with it share
no game."""

from __future__ import annotations

import json

import pytest

from agentrl.environments.spec import SPEC_FORMS
from agentrl.environments.split import (
    EXTRA_TRIES,
    TEST_SEED_OFFSET,
    draw_disjoint,
    max_tries,
)

from .conftest import TEXTARENA_SEEDS, accepted_ids, openenv_target, prepare_ids


def _items_of(key_of, prompt_of=None):
    """make(seed) -> (seed, prompt, game): the game key_of(seed), its prompt prompt_of(seed)
    (the game itself when None: nothing hidden), recording each seed tried."""
    tried = []

    def make(seed):
        tried.append(seed)
        game = key_of(seed)
        return seed, game if prompt_of is None else prompt_of(seed), game

    return make, tried


def test_a_seed_whose_item_an_earlier_row_has_is_skipped():
    make, _ = _items_of(lambda s: s % 1000 // 2)  # seeds 2k and 2k+1 give one item
    train, test = draw_disjoint("env", make, 3, 2, seed=0)
    assert train == [0, 2, 4]
    # 1_000_000 + 0..5 are items 0..2 again, 1_000_006.. are new
    assert test == [TEST_SEED_OFFSET + 6, TEST_SEED_OFFSET + 8]


def test_an_environment_that_ignores_its_seed_is_refused_after_a_bounded_number_of_seeds():
    make, tried = _items_of(lambda s: "the one puzzle")
    with pytest.raises(ValueError) as err:
        draw_disjoint("textarena:Countdown-v0", make, 3, 2, seed=0)
    assert len(tried) == max_tries(3) == 6 + EXTRA_TRIES
    assert str(err.value) == ("textarena:Countdown-v0: 26 seeds gave 1 distinct item: it "
                              "ignores its seed, so train and test cannot hold different items")


def test_an_environment_with_few_items_says_how_many_it_can_give():
    make, tried = _items_of(lambda s: s % 20)  # GuessTheNumber-v0's 20 numbers
    with pytest.raises(ValueError) as err:
        draw_disjoint("env", make, 15, 10, seed=0)
    assert str(err.value) == ("env: 55 seeds gave 20 distinct items, fewer than --size + "
                              "--test-size = 25 (train and test share none): ask for at most "
                              "20 in all")
    assert len(tried) == 15 + max_tries(10)  # train's 15 all new, then test's bound
    train, test = draw_disjoint("env", make, 15, 5, seed=0)  # what it said it can give
    assert len(set(train) | set(test)) == 20


def test_train_seeds_never_reach_the_test_range():
    make, tried = _items_of(lambda s: 0)
    with pytest.raises(ValueError, match="1 distinct item"):
        draw_disjoint("env", make, 2, 1, seed=TEST_SEED_OFFSET - 3)
    assert tried == [TEST_SEED_OFFSET - 3, TEST_SEED_OFFSET - 2, TEST_SEED_OFFSET - 1]
    with pytest.raises(ValueError, match="--seed \\+ --size must stay below 1000000"):
        draw_disjoint("env", make, 10, 1, seed=TEST_SEED_OFFSET - 5)


def test_games_with_one_prompt_are_refused_naming_the_flag_that_tells_them_apart():
    make, tried = _items_of(lambda s: s % 20, prompt_of=lambda s: "Guess a number")
    with pytest.raises(ValueError) as err:
        draw_disjoint("textarena:GuessTheNumber-v0", make, 3, 2, seed=0)
    assert len(tried) == max_tries(3)  # train finds 1 of its 3 and stops at its bound
    assert str(err.value) == (
        "textarena:GuessTheNumber-v0: its prompt does not change with the seed (26 seeds gave "
        "1 prompt and 20 games that differ only in hidden state), so train and test would "
        "share a prompt: pass --allow-shared-prompts to prepare it anyway (train and test "
        "then share no hidden game)")
    train, test = draw_disjoint("env", make, 3, 2, seed=0, allow_shared_prompts=True)
    assert train == [0, 1, 2] and test == [TEST_SEED_OFFSET + 3, TEST_SEED_OFFSET + 4]


def test_few_prompts_over_more_games_say_both_counts():
    make, _ = _items_of(lambda s: s % 20, prompt_of=lambda s: s % 4)  # 4 boards, 20 games
    with pytest.raises(ValueError) as err:
        draw_disjoint("env", make, 4, 2, seed=0)
    assert str(err.value) == (
        "env: 28 seeds gave 4 distinct prompts, fewer than --size + --test-size = 6 (train "
        "and test share none): ask for at most 4 in all, or pass --allow-shared-prompts to "
        "count games that differ only in hidden state (20 seen; train and test then share "
        "prompts)")
    train, test = draw_disjoint("env", make, 3, 1, seed=0)  # 4 prompts: each once
    assert train == [0, 1, 2] and test == [TEST_SEED_OFFSET + 3]


# TextArena 0.7.4's one-puzzle games: whatever the seed, the same game
IGNORE_THEIR_SEED = {"Countdown-v0", "Cryptarithm-v0", "PegJump-v0", "TowerOfHanoi-v0",
                     "TowerOfHanoi-v0-medium", "TowerOfHanoi-v0-hard",
                     "TowerOfHanoi-v0-hardcore", "TowerOfHanoi-v0-extreme"}
IGNORE_THEIR_SEED |= {f"{game}-train" for game in IGNORE_THEIR_SEED}
# games whose first observation is the same for every seed, their setup hidden (the number,
# the code, the arms' odds, the mines): refused unless --allow-shared-prompts
HIDDEN_SETUP = ("textarena:Bandit-", "textarena:GuessTheNumber-", "textarena:Mastermind-",
                "textarena:Minesweeper-", "openenv:openenv_guess_env")


def _prompt(row: dict) -> str:
    return json.dumps(row["prompt"], sort_keys=True)


def _game(spec: str, row: dict) -> str:
    """What a row of a shared prompt is: the setup its prompt hides (the game remade from
    the row's seed)."""
    seed = row["extra_info"]["seed"]
    if spec.startswith("openenv:"):
        return f"{_prompt(row)} {openenv_target(seed)}"
    from agentrl.environments.textarena import game_key
    from agentrl.interactions.textarena import make_game

    game, first = make_game(spec.partition(":")[2], seed)
    game.close()
    return game_key(game, first, seed)


def _shared_nothing(prepared: dict, item) -> list[str]:
    """The specs of `prepared` whose train and test hold an item (`item(spec, row)`) twice."""
    bad = []
    for spec, (train, test) in prepared.items():
        train_items = [item(spec, r) for r in train]
        test_items = [item(spec, r) for r in test]
        if (len(set(train_items)) < len(train) or len(set(test_items)) < len(test)
                or set(train_items) & set(test_items)):  # fmt: skip
            bad.append(spec)
    return bad


def test_every_accepted_id_writes_train_and_test_that_share_no_prompt_or_is_refused(every_id):
    """Every kind the CLI takes, every id of it: about 25 s for 822 ids on 2 busy cores
    (reasoning-gym's tasks are made for its own sweep too: test_reasoning_gym.py)."""
    prepared = {spec: result for kind in SPEC_FORMS for spec, result in every_id(kind).items()}
    sizes = {kind: len(accepted_ids(kind)) for kind in SPEC_FORMS}
    assert len(prepared) == sum(sizes.values()) and sizes["textarena"] > 700
    refused = {spec: why for spec, why in prepared.items() if isinstance(why, str)}
    assert all("\n" not in why for why in refused.values())
    ignore = {spec.partition(":")[2] for spec, why in refused.items() if "ignores its seed" in why}
    assert ignore == IGNORE_THEIR_SEED
    hidden = {spec for spec, why in refused.items() if "--allow-shared-prompts" in why}
    assert all(spec.startswith(HIDDEN_SETUP) for spec in hidden), hidden
    assert all(any(s.startswith(prefix) for s in hidden) for prefix in HIDDEN_SETUP), hidden
    accepted = {spec: rows for spec, rows in prepared.items() if spec not in refused}
    assert _shared_nothing(accepted, lambda spec, row: _prompt(row)) == []
    assert {spec.partition(":")[0] for spec in accepted} == set(SPEC_FORMS) - {"openenv"}
    assert set(TEXTARENA_SEEDS) <= {s.partition(":")[2] for s in accepted}


def test_with_allow_shared_prompts_the_hidden_setup_games_share_no_game():
    """The ids refused for their one prompt, prepared with the flag: train and test share
    that prompt and no game (GuessTheNumber's number, the guess server's target)."""
    names = ["GuessTheNumber-v0", "Mastermind-v0", "Minesweeper-v0", "Bandit-v0"]
    prepared = {**prepare_ids("textarena", names, allow_shared_prompts=True),
                **prepare_ids("openenv", ["openenv_guess_env"], allow_shared_prompts=True)}
    assert not [spec for spec, rows in prepared.items() if isinstance(rows, str)], prepared
    for spec, (train, test) in prepared.items():
        assert len({_prompt(r) for r in train + test}) == 1, spec  # one prompt, several games
    assert _shared_nothing(prepared, _game) == []
    ((train, test),) = [prepared["textarena:GuessTheNumber-v0"]]
    numbers = [_game("textarena:GuessTheNumber-v0", r) for r in train + test]
    assert len(set(numbers)) == len(train) + len(test) == 2
