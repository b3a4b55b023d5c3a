"""Train and test items that are never the same, for environments whose items come by seed.

A TextArena game or an OpenEnv episode is reset with a seed, and two seeds can give the same
item: a game that ignores its seed (TextArena 0.7.4's Countdown, Cryptarithm, PegJump and
TowerOfHanoi are one fixed puzzle each), or one with few setups (GuessTheNumber-v0 has 20
numbers). `draw_disjoint` takes train items from seeds S, S+1, ... and test items from
TEST_SEED_OFFSET + S, ..., each item once: a seed whose item an earlier row of either split
had is skipped. An item is its prompt (what the model is shown), so no prompt is in both
splits; with `allow_shared_prompts` it is its game (the prompt and the setup the adapter can
read, see the adapters), so games whose prompt is the same for every seed (GuessTheNumber's,
Mastermind's: the number, the code are hidden) can be prepared: train and test then share
no game but do share prompts. It tries a bounded number of seeds per split; an environment
that does not give enough distinct items in them is a ValueError saying how many it gave
(and, where only hidden state tells its games apart, naming --allow-shared-prompts), so
`agentrl env prepare` refuses it (exit 2) rather than write a test set that is in training.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

TEST_SEED_OFFSET = 1_000_000  # test episodes' seeds start here (train's from the seed)
EXTRA_TRIES = 20  # seeds tried per split: 2 * count + this
SHARED_PROMPTS_FLAG = "--allow-shared-prompts"

# make(seed) -> (item, its prompt, its game: the prompt and the hidden setup)
Make = Callable[[int], tuple[Any, Hashable, Hashable]]


def max_tries(count: int) -> int:
    """How many seeds a split of `count` items may try."""
    return 2 * count + EXTRA_TRIES


def _draw(make: Make, seeds: range, count: int, seen: set[Hashable], games: set[Hashable],
          by_game: bool) -> tuple[list[Any], int]:
    """Up to `count` items of new keys from `seeds` (keys added to `seen`, every game made to
    `games`); how many seeds tried."""
    items: list[Any] = []
    tried = 0
    for seed in seeds:
        if len(items) == count:
            break
        tried += 1
        item, prompt, game = make(seed)
        games.add(game)
        key = game if by_game else prompt
        if key not in seen:
            seen.add(key)
            items.append(item)
    return items, tried


def draw_disjoint(what: str, make: Make, size: int, test_size: int, seed: int, *,
                  allow_shared_prompts: bool = False) -> tuple[list[Any], list[Any]]:
    """(train items, test items), none shared and none twice: of distinct prompts, or with
    `allow_shared_prompts` of distinct games. ValueError naming `what` when the seeds tried
    give too few."""
    if seed + size > TEST_SEED_OFFSET:
        raise ValueError(f"--seed + --size must stay below {TEST_SEED_OFFSET} (the test "
                         "episodes' seeds)")
    seen: set[Hashable] = set()
    games: set[Hashable] = set()
    train_seeds = range(seed, min(seed + max_tries(size), TEST_SEED_OFFSET))
    train, tried = _draw(make, train_seeds, size, seen, games, allow_shared_prompts)
    test: list[Any] = []
    if len(train) == size:
        start = TEST_SEED_OFFSET + seed
        test, tried_test = _draw(make, range(start, start + max_tries(test_size)), test_size,
                                 seen, games, allow_shared_prompts)
        tried += tried_test
    if len(train) < size or len(test) < test_size:
        raise ValueError(too_few(what, len(seen), tried, size, test_size, len(games)))
    return train, test


def too_few(what: str, distinct: int, tried: int, size: int, test_size: int,
            games: int | None = None) -> str:
    """The one-line refusal of an environment with fewer distinct items than asked for;
    `games` > `distinct` when its items were told apart by prompt and more games hid behind
    the same prompts."""
    asked = size + test_size
    if games is not None and games > distinct:
        if distinct < 2:
            return (f"{what}: its prompt does not change with the seed ({tried} seeds gave 1 "
                    f"prompt and {games} games that differ only in hidden state), so train "
                    f"and test would share a prompt: pass {SHARED_PROMPTS_FLAG} to prepare "
                    "it anyway (train and test then share no hidden game)")
        return (f"{what}: {tried} seeds gave {distinct} distinct prompts, fewer than --size + "
                f"--test-size = {asked} (train and test share none): ask for at most "
                f"{distinct} in all, or pass {SHARED_PROMPTS_FLAG} to count games that "
                f"differ only in hidden state ({games} seen; train and test then share prompts)")
    if distinct < 2:
        return (f"{what}: {tried} seeds gave {distinct} distinct item{'s' * (distinct != 1)}: "
                "it ignores its seed, so train and test cannot hold different items")
    return (f"{what}: {tried} seeds gave {distinct} distinct items, fewer than --size + "
            f"--test-size = {asked} (train and test share none): ask for at most "
            f"{distinct} in all")


__all__ = ["EXTRA_TRIES", "SHARED_PROMPTS_FLAG", "TEST_SEED_OFFSET", "draw_disjoint",
           "max_tries", "too_few"]
