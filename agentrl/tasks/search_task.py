"""The ``search`` task of `agentrl quickstart` (the CPU Search-R1 run): data with an
imperfect search teacher, and the local retriever the search tool talks to.

    data = write_search_data(out_dir, settings, direct_phrasings)
    with serve_search_tool(out_dir) as tool_config:   # a BM25 retriever on a free port
        ...                                           # tool_config names its URL

The world, the pools and the questions are agentrl/tasks/search_facts.py. The teacher
searches exactly what a perfect searcher would (the person, the organisation, or both for a
two-hop question) and its tool responses are what the search tool returns for those
queries (the same index, the same formatting), then answers with the fact it read. On the
`direct_phrasings` a share `direct_rate` of its traces answers at once with the true answer,
which the model cannot know: after SFT it searches too rarely, and RL has to discover when
to search.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import yaml

from agentrl.plugins import load_object
from agentrl.tasks.quickstart import TaskData, check_disjoint, write_task_data
from agentrl.tasks.search_facts import (
    TOOL_NAME,
    make_search_rows,
    make_world,
    world_corpus,
)
from agentrl.utils.jsonl import write_jsonl

TOPK = 1  # documents per query: the exact name always retrieves its own document
N_PEOPLE = 3000
# The tool's schema as the model sees it (one line with the compact template).
SEARCH_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Search the knowledge base.",
        "parameters": {
            "type": "object",
            "properties": {"query_list": {"type": "array", "items": {"type": "string"}}},
            "required": ["query_list"],
        },
    },
}


def _index(docs: list[dict[str, Any]]) -> Any:
    return load_object("envs.retriever.index.BM25Index").build(docs)


def teacher_messages(row: dict[str, Any], index: Any, direct: bool) -> list[dict[str, Any]]:
    """The prompt, then either the answer at once (`direct`) or one search per hop with
    the tool's real responses, then the answer."""
    format_documents = load_object("tools.search.format_documents")
    messages = [dict(m) for m in row["prompt"]]
    answer = row["reward_model"]["ground_truth"]["target"][0]
    if not direct:
        for query in row["extra_info"]["queries"]:
            call = {"name": TOOL_NAME, "arguments": {"query_list": [query]}}
            messages.append({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": call}]})  # fmt: skip
            (hits,) = index.search([query], TOPK)
            messages.append({"role": "tool", "content": format_documents([d for d, _ in hits])})
    messages.append({"role": "assistant", "content": f"<answer>{answer}</answer>"})
    return messages


def write_search_data(out_dir: Path, s: Any, direct_phrasings: Collection[str]) -> TaskData:
    """Corpus, SFT conversations, train and test parquet; group labels of the test rows."""
    world = make_world(N_PEOPLE, seed=s.seed)
    docs = world_corpus(world)
    write_jsonl(docs, out_dir / "corpus.jsonl")
    index = _index(docs)
    sft_rows = make_search_rows(world, s.sft_examples, "sft", s.seed)
    train = make_search_rows(world, s.n_train, "train", s.seed)
    test = make_search_rows(world, s.n_test, "test", s.seed)
    check_disjoint(
        {name: {r["extra_info"]["person"] for r in rows}
         for name, rows in (("sft", sft_rows), ("train", train), ("test", test))}
    )  # fmt: skip
    rng = random.Random(f"agentrl/search_teacher:{s.seed}")
    sft = []
    for row in sft_rows:
        extra = row["extra_info"]
        direct = extra["phrasing"] in direct_phrasings and rng.random() < s.direct_rate
        sft.append(
            {
                "messages": teacher_messages(row, index, direct),
                "tools": [SEARCH_SCHEMA],
                "phrasing": extra["phrasing"],
                "uses_tool": not direct,
            }
        )
    hops = [f"{r['extra_info']['hops']}_hop" for r in test]
    return write_task_data(out_dir, sft, train, test, direct_phrasings, hops=hops)


@contextlib.contextmanager
def serve_search_tool(data_dir: Path) -> Iterator[Path]:
    """Serve a BM25 index of `data_dir/corpus.jsonl` on a free local port for as long as
    the context lasts; yield a search tool config (verl's format) that points at it."""
    from agentrl.utils.serving import serve_in_thread
    read_corpus = load_object("envs.retriever.index.read_corpus")
    create_app = load_object("envs.retriever.server.create_app")
    app = create_app(_index(list(read_corpus(data_dir / "corpus.jsonl"))), default_topk=TOPK)
    with serve_in_thread(app) as url:
        config = {
            "tools": [
                {
                    "class_name": "tools.search.SearchTool",
                    "config": {"retrieval_service_url": f"{url}/retrieve", "topk": TOPK,
                               "timeout": 30},
                    "tool_schema": SEARCH_SCHEMA,
                }
            ]
        }  # fmt: skip
        path = data_dir / "search_tool.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        yield path



