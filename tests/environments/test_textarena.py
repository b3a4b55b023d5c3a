"""TextArena episodes as verl rows: one game per seed, train and test seeds apart, the
interaction config that replays them."""

from __future__ import annotations

import pytest

pytest.importorskip("textarena")

from agentrl.environments.textarena import (  # noqa: E402
    TEST_SEED_OFFSET,
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
    train, test, extra = prepare("GuessTheNumber-v0", 3, 2, seed=10)
    seeds = [r["extra_info"]["seed"] for r in train], [r["extra_info"]["seed"] for r in test]
    assert seeds == ([10, 11, 12], [TEST_SEED_OFFSET + 10, TEST_SEED_OFFSET + 11])
    assert extra == {"interaction": interaction_config()}
    entry = extra["interaction"]["interaction"][0]
    assert entry["class_name"] == "agentrl.interactions.textarena.TextArenaInteraction"
    with pytest.raises(ValueError, match="below 1000000"):
        prepare("GuessTheNumber-v0", 10, 1, seed=TEST_SEED_OFFSET - 5)
