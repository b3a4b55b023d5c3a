"""A small built-in corpus and a synthetic corpus generator, for tests, benches and demos.

python -m envs.retriever.sample corpus.jsonl        # writes the sample corpus
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SAMPLE_DOCS: list[tuple[str, str]] = [
    ("Paris", "Paris is the capital and largest city of France."),
    ("Berlin", "Berlin is the capital of Germany and its largest city."),
    (
        "Python (programming language)",
        "Python is a high-level programming language created by Guido van Rossum.",
    ),
    ("Mount Everest", "Mount Everest is Earth's highest mountain above sea level."),
    ("Amazon River", "The Amazon is the largest river in the world by discharge volume."),
    ("Marie Curie", "Marie Curie was a physicist and chemist who won two Nobel Prizes."),
    ("Jupiter", "Jupiter is the largest planet in the Solar System."),
    ("Tokyo", "Tokyo is the capital of Japan."),
]


def sample_corpus() -> list[dict[str, Any]]:
    """The sample documents in Search-R1's format: ``{"id", "contents": '"Title"\\ntext'}``."""
    return [
        {"id": str(i), "contents": f'"{title}"\n{text}'}
        for i, (title, text) in enumerate(SAMPLE_DOCS)
    ]


_WORDS = (
    "alpha beta gamma delta river mountain city planet music history science energy ocean "
    "forest desert island language computer theory engine bridge castle garden painting"
).split()


def synthetic_corpus(num_docs: int, words_per_doc: int = 40, seed: int = 0) -> list[dict[str, Any]]:
    """Random documents over a small vocabulary plus a unique token each (``tokN``)."""
    rng = random.Random(seed)
    docs = []
    for i in range(num_docs):
        words = " ".join(rng.choice(_WORDS) for _ in range(words_per_doc))
        docs.append({"id": str(i), "contents": f'"Document {i}"\ntok{i} {words}'})
    return docs


def write_corpus(path: str | Path, docs: Iterable[dict[str, Any]]) -> Path:
    """Write documents as a jsonl corpus; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m envs.retriever.sample OUT.jsonl")
    write_corpus(sys.argv[1], sample_corpus())
