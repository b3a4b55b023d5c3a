"""What fixed policies are worth in TextArena's Blackjack-v0 (the recipes/envs game): each
policy plays `--games` games through `agentrl.interactions.textarena.Game`, and the mean of
the game's reward (share of the 5 hands won) is printed with its standard error, one JSON
line. The yardsticks of recipes/envs/README.md's blackjack table.

    python bench/blackjack_policies.py [--games 2000] [--first-seed 10000]
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable

_DEALER = re.compile(r"Dealer shows: (\w+?)[♠♥♦♣]")
Policy = Callable[[int, int], str]  # (player's score, dealer's up card's value) -> move


def card_value(rank: str) -> int:
    """A card's points as the game counts them (an ace as 11)."""
    return 10 if rank in ("J", "Q", "K", "10") else 11 if rank == "A" else int(rank)


POLICIES: dict[str, Policy] = {
    "always_hit (hit up to 20; hitting on 21 too wins nothing)":
        lambda s, d: "[Hit]" if s < 21 else "[Stand]",
    "always_stand": lambda s, d: "[Stand]",
    "hit_up_to_11": lambda s, d: "[Hit]" if s <= 11 else "[Stand]",
    "hit_up_to_16": lambda s, d: "[Hit]" if s <= 16 else "[Stand]",
    "basic (hit 12-16 only against 7 or more)":
        lambda s, d: "[Hit]" if s <= 11 or (s <= 16 and d >= 7) else "[Stand]",
}  # fmt: skip


def play(policy: Policy, seed: int) -> float:
    """One game of `policy`; the game's reward."""
    from agentrl.environments.quickstart_game import ENV_ID, last_score
    from agentrl.interactions.textarena import make_game

    game, text = make_game(ENV_ID, seed)
    while True:
        score, dealer = last_score(text), _DEALER.findall(text)
        if score is None or not dealer:
            raise ValueError(f"seed {seed}: no hand in {text!r}")
        done, text, reward = game.play(policy(score, card_value(dealer[-1])))
        if done:
            return reward


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=2000)
    parser.add_argument("--first-seed", type=int, default=10_000)
    args = parser.parse_args()
    from agentrl.quickstart.evaluation import mean_stderr  # the recipe's own ± (sqrt(var/n))

    out = {}
    for name, policy in POLICIES.items():
        rewards = [play(policy, args.first_seed + i) for i in range(args.games)]
        out[name] = {"mean": round(sum(rewards) / len(rewards), 4),
                     "stderr": round(mean_stderr(rewards), 4)}  # fmt: skip
    print(json.dumps({"games": args.games, "first_seed": args.first_seed, "policies": out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
