"""Train and test share no item: seeds that give an item an earlier row has are skipped, an
environment with too few items is refused in one line, and every id `agentrl env prepare`
accepts (tests/environments/conftest.py) writes splits that share no item or is refused."""

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

from .conftest import TEXTARENA_SEEDS, accepted_ids, openenv_target


def _items_of(key_of):
    """make(seed) -> (seed, key_of(seed)), recording each seed tried."""
    tried = []

    def make(seed):
        tried.append(seed)
        return seed, key_of(seed)

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


# TextArena 0.7.4's one-puzzle games: whatever the seed, the same game
IGNORE_THEIR_SEED = {"Countdown-v0", "Cryptarithm-v0", "PegJump-v0", "TowerOfHanoi-v0",
                     "TowerOfHanoi-v0-medium", "TowerOfHanoi-v0-hard",
                     "TowerOfHanoi-v0-hardcore", "TowerOfHanoi-v0-extreme"}
IGNORE_THEIR_SEED |= {f"{game}-train" for game in IGNORE_THEIR_SEED}
# games whose first observation is the same for every seed, their setup hidden (the number,
# the code, the arms' odds, the mines): their rows share a prompt and differ in the game
HIDDEN_SETUP = ("textarena:Bandit-", "textarena:GuessTheNumber-", "textarena:Mastermind-",
                "textarena:Minesweeper-", "openenv:openenv_guess_env")


def _item(spec: str, row: dict, prompt_repeats: bool) -> str:
    """What a row is: its prompt, and where prompts repeat, the setup they hide (the game
    remade from the row's seed)."""
    prompt = json.dumps(row["prompt"], sort_keys=True)
    if not prompt_repeats:
        return prompt
    seed = row["extra_info"]["seed"]
    if spec.startswith("openenv:"):
        return f"{prompt} {openenv_target(seed)}"
    from agentrl.environments.textarena import game_key
    from agentrl.interactions.textarena import make_game

    game, first = make_game(spec.partition(":")[2], seed)
    game.close()
    return game_key(game, first, seed)


def test_every_accepted_id_writes_train_and_test_that_share_no_item_or_is_refused(every_id):
    """Every kind the CLI takes, every id of it: about 25 s for 822 ids on 2 busy cores
    (reasoning-gym's tasks are made for its own sweep too: test_reasoning_gym.py)."""
    prepared = {spec: result for kind in SPEC_FORMS for spec, result in every_id(kind).items()}
    sizes = {kind: len(accepted_ids(kind)) for kind in SPEC_FORMS}
    assert len(prepared) == sum(sizes.values()) and sizes["textarena"] > 700
    refused = {spec: why for spec, why in prepared.items() if isinstance(why, str)}
    assert all("\n" not in why for why in refused.values())
    ignore = {spec.partition(":")[2] for spec, why in refused.items() if "ignores its seed" in why}
    assert ignore == IGNORE_THEIR_SEED
    shared_prompts = set()
    for spec, result in prepared.items():
        if spec in refused:
            continue
        train, test = result
        prompts = [json.dumps(r["prompt"], sort_keys=True) for r in train + test]
        repeats = len(set(prompts)) < len(prompts)
        if repeats:
            shared_prompts.add(spec)
        train_items = [_item(spec, r, repeats) for r in train]
        test_items = [_item(spec, r, repeats) for r in test]
        assert len(set(train_items)) == len(train) and len(set(test_items)) == len(test), spec
        assert not set(train_items) & set(test_items), spec
    assert all(spec.startswith(HIDDEN_SETUP) for spec in shared_prompts), shared_prompts
    accepted = {spec.partition(":")[0] for spec in prepared if spec not in refused}
    assert accepted == set(SPEC_FORMS)  # every kind has ids that prepare
    assert set(TEXTARENA_SEEDS) <= {s.partition(":")[2] for s in prepared if s not in refused}
