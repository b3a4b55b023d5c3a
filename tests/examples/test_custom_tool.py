"""Tests for examples/custom_tool/: the user's tool, its YAML and its tools_kwargs, end to end."""

import asyncio
from pathlib import Path

import pyarrow.parquet as pq

from agentrl.data.rows import normalize_tools_kwargs
from agentrl.plugins import load_object
from agentrl.tools import execute_tool_call, load_tool_schemas, load_tools
from agentrl.tools.testing import check_tool_contract

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_tool"
CONFIG = EXAMPLE / "guess_number.yaml"


def test_yaml_loads_the_tool_and_its_schema():
    tools = load_tools(CONFIG)
    assert list(tools) == ["guess_number"]
    assert type(tools["guess_number"]).__name__ == "GuessNumberTool"
    assert tools["guess_number"].max_guesses == 10
    schema = load_tool_schemas(CONFIG)[0]["function"]
    assert schema["parameters"]["properties"] == {
        "guess": {"type": "integer", "description": "Your guess."}
    }


def test_contract():
    tool = load_tools(CONFIG)["guess_number"]
    report = asyncio.run(check_tool_contract(tool, {"guess": 50}, {"secret": 37}))
    assert report.create_response.text == "I picked a whole number from 1 to 100."
    assert (report.response.text, report.metrics, report.reward) == ("lower", {"guesses": 1}, 0.0)


async def play(tool, tools_kwargs):
    """What the rollout engine does for one trajectory, with the model playing binary search."""
    kwargs = tools_kwargs["guess_number"]
    instance_id, _ = await tool.create(**kwargs["create_kwargs"])
    low, high = kwargs["create_kwargs"]["low"], kwargs["create_kwargs"]["high"]
    answers = []
    try:
        while True:
            guess = (low + high) // 2
            response, _, _ = await execute_tool_call(
                tool, instance_id, {"guess": guess}, timeout=5, **kwargs["execute_kwargs"]
            )
            answers.append((guess, response.text))
            if response.text == "correct":
                break
            low, high = (guess + 1, high) if response.text == "higher" else (low, guess - 1)
        return answers, await tool.calc_reward(instance_id, **kwargs["calc_reward_kwargs"])
    finally:
        await tool.release(instance_id, **kwargs["release_kwargs"])


def test_dataset_rows_drive_the_whole_lifecycle(tmp_path):
    make_data = load_object(f"{EXAMPLE / 'make_data.py'}:write_dataset")
    path = make_data(tmp_path / "train.parquet", rows=3, seed=0)
    rows = pq.read_table(path).to_pylist()
    secrets = [
        r["extra_info"]["tools_kwargs"]["guess_number"]["create_kwargs"]["secret"] for r in rows
    ]
    assert secrets == [50, 98, 54]  # random.Random(0).randint(1, 100) three times
    tool = load_tools(CONFIG)["guess_number"]
    tools_kwargs = normalize_tools_kwargs(rows[1]["extra_info"]["tools_kwargs"], "row 1")
    answers, reward = asyncio.run(play(tool, tools_kwargs))
    assert answers == [
        (50, "higher"),
        (75, "higher"),
        (88, "higher"),
        (94, "higher"),
        (97, "higher"),
        (99, "lower"),
        (98, "correct"),
    ]
    assert reward == 1.0 - 0.1 * 6
    assert tool._instance_dict == {}


def test_bad_guess_and_exhausted_game():
    tool = load_tools(CONFIG)["guess_number"]

    async def go():
        instance_id, _ = await tool.create(secret=5, low=1, high=10)
        bad = await execute_tool_call(tool, instance_id, {"guess": "five"}, timeout=5)
        outs = [(await tool.execute(instance_id, {"guess": 1}))[0].text for _ in range(11)]
        reward = await tool.calc_reward(instance_id)
        await tool.release(instance_id)
        return bad, outs, reward

    bad, outs, reward = asyncio.run(go())
    assert bad[2] == {"tool_error": "invalid_arguments"}
    assert outs == ["higher"] * 10 + ["No guesses left."]
    assert reward == 0.0
