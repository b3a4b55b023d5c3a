"""The synthetic world of the CPU Search-R1 run: unique facts, disjoint pools, questions."""

from __future__ import annotations

import pytest

from agentrl.reward.score import default_compute_score as compute_score
from agentrl.tasks.search_facts import (
    SEARCH_PHRASINGS,
    make_search_rows,
    make_world,
    person_pool,
    world_corpus,
)


@pytest.fixture(scope="module")
def world():
    return make_world(600, seed=3)


def test_world_is_deterministic_and_every_fact_is_in_one_document(world):
    assert make_world(600, seed=3) == world and make_world(600, seed=4) != world
    assert len({p.name for p in world}) == len({p.org for p in world}) == 600
    docs = world_corpus(world)
    assert len(docs) == 1200 and len({d["id"] for d in docs}) == 1200
    for person in world[:50]:
        birth = [d for d in docs if f"{person.name} is a" in d["contents"]]
        founded = [d for d in docs if f"founded by {person.name}." in d["contents"]]
        assert len(birth) == len(founded) == 1
        assert birth[0]["contents"].startswith(f'"{person.name}"\n')
        assert person.town in birth[0]["contents"] and person.org in founded[0]["contents"]


def test_rows_keep_to_their_pool_and_answer_from_the_facts(world):
    rows = {split: make_search_rows(world, 60, split, seed=1) for split in ("sft", "train", "test")}
    people = {split: {r["extra_info"]["person"] for r in rs} for split, rs in rows.items()}
    assert not people["sft"] & people["train"] and not people["test"] & (
        people["sft"] | people["train"]
    )
    by_name = {p.name: p for p in world}
    for split, split_rows in rows.items():
        for row in split_rows:
            extra = row["extra_info"]
            person = by_name[extra["person"]]
            assert person_pool(person.name) == split
            kind, template = SEARCH_PHRASINGS[extra["phrasing"]]
            assert extra["question"] == template.format(person=person.name, org=person.org)
            answer = person.name if kind == "founder" else person.town
            assert row["reward_model"]["ground_truth"] == {"target": [answer]}
            assert extra["hops"] == (2 if kind == "bridge" else 1) == len(extra["queries"])
            assert extra["tools_kwargs"]["search"]["create_kwargs"]["ground_truth"] == answer
            solution = f"<answer>{answer}</answer>"
            assert compute_score(row["data_source"], solution, row["reward_model"]["ground_truth"]) == 1.0
    with pytest.raises(ValueError, match="distinct questions"):
        make_search_rows(world, 10**6, "test", seed=0)
