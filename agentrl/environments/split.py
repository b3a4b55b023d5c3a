"""Train and test items that are never the same, for environments whose items come by seed.

A TextArena game or an OpenEnv episode is reset with a seed, and two seeds can give the same
item: a game that ignores its seed (TextArena 0.7.4's Countdown, Cryptarithm, PegJump and
TowerOfHanoi are one fixed puzzle each), or one with few setups (GuessTheNumber-v0 has 20
numbers). `draw_disjoint` takes train items from seeds S, S+1, ... and test items from
TEST_SEED_OFFSET + S, ..., each item once: a seed whose item's key (what the model is shown
and the setup the adapter can read, see the adapters) an earlier row of either split had is
skipped. It tries a bounded number of seeds per split; an environment that does not give
enough distinct items in them is a ValueError saying how many it gave, so `agentrl env
prepare` refuses it (exit 2) rather than write a test set that is in training.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

TEST_SEED_OFFSET = 1_000_000  # test episodes' seeds start here (train's from the seed)
EXTRA_TRIES = 20  # seeds tried per split: 2 * count + this


def max_tries(count: int) -> int:
    """How many seeds a split of `count` items may try."""
    return 2 * count + EXTRA_TRIES


def _draw(make: Callable[[int], tuple[Any, Hashable]], seeds: range, count: int,
          seen: set[Hashable]) -> tuple[list[Any], int]:
    """Up to `count` items of new keys from `seeds` (keys added to `seen`); how many tried."""
    items: list[Any] = []
    tried = 0
    for seed in seeds:
        if len(items) == count:
            break
        tried += 1
        item, key = make(seed)
        if key not in seen:
            seen.add(key)
            items.append(item)
    return items, tried


def draw_disjoint(what: str, make: Callable[[int], tuple[Any, Hashable]], size: int,
                  test_size: int, seed: int) -> tuple[list[Any], list[Any]]:
    """(train items, test items) of distinct keys, none shared; `make(seed)` gives (item,
    key). ValueError naming `what` when the seeds tried give too few distinct items."""
    if seed + size > TEST_SEED_OFFSET:
        raise ValueError(f"--seed + --size must stay below {TEST_SEED_OFFSET} (the test "
                         "episodes' seeds)")
    seen: set[Hashable] = set()
    train_seeds = range(seed, min(seed + max_tries(size), TEST_SEED_OFFSET))
    train, tried = _draw(make, train_seeds, size, seen)
    test: list[Any] = []
    if len(train) == size:
        start = TEST_SEED_OFFSET + seed
        test, tried_test = _draw(make, range(start, start + max_tries(test_size)), test_size,
                                 seen)
        tried += tried_test
    if len(train) < size or len(test) < test_size:
        raise ValueError(too_few(what, len(seen), tried, size, test_size))
    return train, test


def too_few(what: str, distinct: int, tried: int, size: int, test_size: int) -> str:
    """The one-line refusal of an environment with fewer distinct items than asked for."""
    if distinct < 2:
        return (f"{what}: {tried} seeds gave {distinct} distinct item{'s' * (distinct != 1)}: "
                "it ignores its seed, so train and test cannot hold different items")
    return (f"{what}: {tried} seeds gave {distinct} distinct items, fewer than --size + "
            f"--test-size = {size + test_size} (train and test share none): ask for at most "
            f"{distinct} in all")


__all__ = ["EXTRA_TRIES", "TEST_SEED_OFFSET", "draw_disjoint", "max_tries", "too_few"]
