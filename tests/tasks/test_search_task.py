"""The search task: the teacher's tool responses are what the real search tool answers
from the served retriever, its imperfection, and (slow) a CI-size run with real searches."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentrl.quickstart import run_quickstart, settings_for
from agentrl.tasks.quickstart import SEARCH, SEARCH_DIRECT_PHRASINGS
from agentrl.tasks.search_task import serve_search_tool
from agentrl.tools import load_tools


def test_teacher_traces_are_what_the_served_search_tool_returns(tmp_path):
    settings = settings_for("search", sft_examples=300, n_train=50, n_test=40)
    data = SEARCH.prepare(tmp_path, settings)
    sft = [json.loads(line) for line in data.sft.read_text().splitlines()]
    direct = [r for r in sft if r["phrasing"] in SEARCH_DIRECT_PHRASINGS]
    share = sum(not r["uses_tool"] for r in direct) / len(direct)
    assert 0.65 < share < 0.95
    assert all(r["uses_tool"] for r in sft if r["phrasing"] not in SEARCH_DIRECT_PHRASINGS)
    assert set(data.groups) == {"phrasing", "hops"} and len(data.groups["hops"]) == 40

    pairs = []  # (query, the teacher's tool response) of the first 20 searching traces
    for row in [r for r in sft if r["uses_tool"]][:20]:
        messages = row["messages"]
        for call, response in zip(messages, messages[1:], strict=False):
            if call["role"] == "assistant" and call.get("tool_calls"):
                (query,) = call["tool_calls"][0]["function"]["arguments"]["query_list"]
                assert response["role"] == "tool"
                pairs.append((query, response["content"]))
    assert len(pairs) >= 20

    async def search_all(tool) -> list[str]:
        texts = []
        try:
            for query, _ in pairs:
                instance, _ = await tool.create()
                response, _, metrics = await tool.execute(instance, {"query_list": [query]})
                await tool.release(instance)
                assert "tool_error" not in metrics
                texts.append(response.text)
        finally:
            await tool.aclose()
        return texts

    with serve_search_tool(tmp_path) as tool_config:
        (tool,) = load_tools(tool_config).values()
        assert asyncio.run(search_all(tool)) == [text for _, text in pairs]
    # two-hop traces search twice and the last document holds the answer
    bridge = next(r for r in sft if r["uses_tool"] and r["phrasing"].startswith("bridge"))
    tools = [m["content"] for m in bridge["messages"] if m["role"] == "tool"]
    answer = bridge["messages"][-1]["content"].removeprefix("<answer>").removesuffix("</answer>")
    assert len(tools) == 2 and answer in tools[1]


@pytest.mark.slow
def test_ci_size_search_run_uses_the_real_retriever(tmp_path):
    """A few GRPO steps against the served retriever: real searches, varied rewards (600
    SFT steps: the model learns to copy names between steps ~400 and ~800; 300 steps, or 500
    at batch 16, left every answer wrong and every reward 0 at seed 0). No validation
    during RL (val_freq 0; nothing here reads it)."""
    out = tmp_path / "sr"
    report = run_quickstart(
        out, settings_for("search", sft_steps=600, steps=3, n_train=48, n_test=32, control=False,
                          val_freq=0)
    )
    assert report == json.loads((out / "report.json").read_text())
    for name in ("eval_sft", "eval_rl"):
        assert report[name]["exact_match"] == report[name]["accuracy"]
    assert report["eval_sft"]["searches_per_question"] > 0
    rows = [json.loads(line) for path in sorted((out / "rl" / "rollouts").glob("*.jsonl"))
            for line in path.read_text().splitlines()]  # fmt: skip
    assert sum((r["tool_calls"] or {}).get("search", 0) for r in rows) > 0
    tool_turns = [m for r in rows for m in r["messages"] if m["role"] == "tool"]
    assert any(m["content"].startswith("Doc 1(Title: ") for m in tool_turns)  # real documents
    assert len({r["score"] for r in rows}) > 1  # rewards are not all equal
