"""A synthetic world of fictional people and organisations, for the CPU Search-R1 run.

    world = make_world(n_people=3000, seed=0)
    corpus = world_corpus(world)                  # retriever documents {"id", "contents"}
    rows = make_search_rows(world, 300, "test", seed=0)   # verl rows with tools_kwargs

Every person has one document (``"Nimard Ith"\\nNimard Ith is a weaver born in Sabholm.``)
and founded one organisation, which has its own document (``"Galgal Company"\\nThe Galgal
Company was founded by Nimard Ith.``). Names, towns and organisations are made of random
syllables, so no answer can be known without searching; each fact is in exactly one
document. Questions come in six phrasings (``SEARCH_PHRASINGS``) over three kinds:

- ``birthplace`` (one hop): "Where was Nimard Ith born?" -> search the person -> Sabholm;
- ``founder`` (one hop): "Who founded the Galgal Company?" -> search the organisation;
- ``bridge`` (two hops): "Where was the founder of the Galgal Company born?" -> search the
  organisation, read the founder's name, search the founder -> the town.

People are split into three disjoint pools by a hash of their name (``person_pool``:
``sft`` 2/3, ``train`` 7/30, ``test`` 1/10, the shares of Search-R1 notes' 2,000 / 700 /
300), and a question belongs to the pool of the person it is about (the founder, for
organisation questions), so SFT, RL and test questions never share a person or a fact.

Rows are verl rows (docs/data.md) with data source ``agentrl/search_facts``, scored by
Search-R1's exact match; ``extra_info`` keeps the ``phrasing``, ``kind``, ``hops`` and the
``queries`` a perfect searcher makes (the SFT teacher uses them).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

DATA_SOURCE = "agentrl/search_facts"
TOOL_NAME = "search"
SEARCH_SYSTEM_PROMPT = "Search, then reply <answer>ANSWER</answer>."

# phrasing -> (kind, question template); {person} / {org} are filled in
SEARCH_PHRASINGS: dict[str, tuple[str, str]] = {
    "born_where": ("birthplace", "Where was {person} born?"),
    "born_town": ("birthplace", "In which town was {person} born?"),
    "founder_who": ("founder", "Who founded the {org}?"),
    "founder_name": ("founder", "Name the founder of the {org}."),
    "bridge_where": ("bridge", "Where was the founder of the {org} born?"),
    "bridge_town": ("bridge", "In which town was the founder of the {org} born?"),
}
_SYLLABLES = (
    "ba dor fen gal hir ith kal lom mar nim or pel quen ras sab tor ul vek wyn zar "
    "bel cor dun eth fal gor hal jen kor lin mor nor pon rin sel tam ven yor"
).split()
_TOWN_SUFFIXES = ("holm", "ford", "by", "wick", "stead", "mere")
_ORG_KINDS = ("Company", "Guild", "Society", "Works", "Trust", "League")
_PROFESSIONS = (
    "weaver", "baker", "sailor", "painter", "miner", "potter", "farmer", "smith",
    "teacher", "doctor", "builder", "singer",
)  # fmt: skip


@dataclass(frozen=True)
class Person:
    name: str
    profession: str
    town: str
    org: str


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(syllables)).capitalize()


def person_pool(name: str) -> str:
    """The pool (``sft``, ``train`` or ``test``) of a person, by a hash of the name."""
    bucket = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "big") % 30
    return "test" if bucket < 3 else "train" if bucket < 10 else "sft"


def make_world(n_people: int = 3000, n_towns: int = 200, seed: int = 0) -> list[Person]:
    """`n_people` fictional people with distinct names and organisations."""
    rng = random.Random(f"agentrl/search_facts:{seed}")
    towns = sorted({_word(rng, 2) + rng.choice(_TOWN_SUFFIXES) for _ in range(n_towns)})
    names: set[str] = set()
    orgs: set[str] = set()
    people = []
    while len(people) < n_people:
        name = f"{_word(rng, 2)} {_word(rng, rng.randint(1, 2))}"
        org = f"{_word(rng, 2)} {rng.choice(_ORG_KINDS)}"
        if name in names or org in orgs:
            continue
        names.add(name)
        orgs.add(org)
        people.append(Person(name, rng.choice(_PROFESSIONS), rng.choice(towns), org))
    return people


def world_corpus(world: list[Person]) -> list[dict[str, str]]:
    """The retriever's documents, Search-R1's corpus format (`"Title"\\ntext`)."""
    docs = []
    for i, p in enumerate(world):
        docs.append({"id": f"p{i}", "contents": f'"{p.name}"\n{p.name} is a {p.profession} '
                                                f"born in {p.town}."})  # fmt: skip
        docs.append({"id": f"o{i}", "contents": f'"{p.org}"\nThe {p.org} was founded by {p.name}.'})
    return docs


def _question(person: Person, phrasing: str) -> tuple[str, str, list[str]]:
    """(question, answer, the queries of a perfect searcher) for one phrasing."""
    kind, template = SEARCH_PHRASINGS[phrasing]
    question = template.format(person=person.name, org=person.org)
    if kind == "birthplace":
        return question, person.town, [person.name]
    if kind == "founder":
        return question, person.name, [person.org]
    return question, person.town, [person.org, person.name]


def make_search_rows(
    world: list[Person],
    n: int,
    split: str,
    seed: int,
    system_prompt: str = SEARCH_SYSTEM_PROMPT,
) -> list[dict]:
    """`n` distinct (person, phrasing) questions about people of the split's pool.

    ``split`` is ``sft``, ``train`` or any other name (the ``test`` pool). Raises if the
    pool has fewer than `n` distinct questions.
    """
    pool = split if split in ("sft", "train") else "test"
    people = [p for p in world if person_pool(p.name) == pool]
    pairs = [(p, phrasing) for p in people for phrasing in SEARCH_PHRASINGS]
    if len(pairs) < n:
        raise ValueError(f"the {pool} pool has {len(pairs)} distinct questions, {n} requested")
    rng = random.Random(f"agentrl/search_facts:{seed}:{split}")
    rows = []
    for index, (person, phrasing) in enumerate(rng.sample(pairs, n)):
        question, answer, queries = _question(person, phrasing)
        kind = SEARCH_PHRASINGS[phrasing][0]
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [
                    {"role": "system", "content": system_prompt},
                    {"role": "user", "content": question},
                ],
                "ability": "qa",
                "reward_model": {"style": "rule", "ground_truth": {"target": [answer]}},
                "extra_info": {
                    "index": index,
                    "split": split,
                    "question": question,
                    "person": person.name,
                    "phrasing": phrasing,
                    "kind": kind,
                    "hops": 2 if kind == "bridge" else 1,
                    "queries": queries,
                    "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": answer}}},
                },
            }
        )
    return rows
