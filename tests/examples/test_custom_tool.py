"""Tests for examples/custom_tool/: the user's tool, its YAML and its tools_kwargs, end to end."""

import asyncio
from pathlib import Path

import pyarrow.parquet as pq
import pytest

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


def test_the_example_has_a_scorer_that_pays_the_tools_reward_and_the_answer(tmp_path):
    compute_score = load_object(f"{EXAMPLE / 'reward.py'}:compute_score")
    tool = load_tools(CONFIG)["guess_number"]
    rows = pq.read_table(load_object(f"{EXAMPLE / 'make_data.py'}:write_dataset")(
        tmp_path / "train.parquet", rows=2, seed=0)).to_pylist()
    _, found = asyncio.run(play(tool, normalize_tools_kwargs(
        rows[1]["extra_info"]["tools_kwargs"], "row 1")))
    assert found == pytest.approx(0.4)  # 7 guesses: 1.0 - 0.1 x 6
    # what the reward manager hands the score function (agentrl/reward/base.py)
    extra = {**rows[1]["extra_info"], "rollout_reward_scores": {"guess_number": found}}
    truth = rows[1]["reward_model"]["ground_truth"]  # "98"
    assert compute_score("guess_number", "It is 98.", truth, extra) == {
        "score": pytest.approx(0.7), "found": pytest.approx(0.4), "answered": 1.0}
    assert compute_score("guess_number", "It is 97.", truth, extra)["score"] == pytest.approx(0.2)
    assert compute_score("guess_number", "no idea", truth, {})["score"] == 0.0
    assert compute_score("guess_number", "98", truth, {"rollout_reward_scores": {
        "guess_number": [0.4, 0.6]}})["score"] == pytest.approx(1.0)


def test_the_readme_training_keys_pass_the_checks_and_without_the_scorer_fail(make_config,
                                                                             tmp_path):  # fmt: skip
    from agentrl.trainer.preflight import run_input_problems

    data = load_object(f"{EXAMPLE / 'make_data.py'}:write_dataset")(tmp_path / "t.parquet", 8)
    keys = [f"data.train_files={data}", "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={CONFIG}"]
    assert run_input_problems(make_config(
        *keys, f"custom_reward_function.path={EXAMPLE / 'reward.py'}",
        "custom_reward_function.name=compute_score")) == []
    (problem,) = run_input_problems(make_config(*keys, "custom_reward_function.path=null"))
    assert "no built-in scorer for data_source 'guess_number'" in problem


@pytest.mark.parametrize(("weight", "scores"), [(0.0, [0.5, 0.5, 0.0, 0.0]),
                                                (1.0, [1.5, 0.5, 0.0, 0.0])])
def test_the_readme_command_trains_the_example(make_config, tmp_path, weight, scores):
    """Two steps of `agentrl train` with the README's keys and the example's data, tool and
    scorer; the policy is scripted (rollout.name=scripted) so the reward path is known: it
    guesses 50 with the tool, then answers 98. Secrets 50, 98, 54, 6 (make_data's seed 0):
    the first row earns the tool's half (found at the first guess), the second the answer's
    half. With `reward_model.tool_reward_weight=1` the tool's calc_reward (1.0 for the
    first row) is added to the score as well."""
    import json

    from agentrl.trainer import PPOTrainer

    data = load_object(f"{EXAMPLE / 'make_data.py'}:write_dataset")(tmp_path / "t.parquet", 4)
    secrets = [r["reward_model"]["ground_truth"] for r in pq.read_table(data).to_pylist()]
    assert secrets == ["50", "98", "54", "6"]
    replies = tmp_path / "replies.jsonl"
    guess = {"name": "guess_number", "arguments": {"guess": 50}}
    replies.write_text(json.dumps(f"<tool_call>\n{json.dumps(guess)}\n</tool_call>") + "\n"
                       + json.dumps("It is 98.") + "\n")
    cfg = make_config(
        f"data.train_files={data}", "data.train_batch_size=4", "data.shuffle=false",
        "data.max_response_length=128", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={CONFIG}",
        f"custom_reward_function.path={EXAMPLE / 'reward.py'}",
        "custom_reward_function.name=compute_score",
        f"reward_model.tool_reward_weight={weight}",
        "actor_rollout_ref.rollout.name=scripted",
        f"+actor_rollout_ref.rollout.engine_kwargs.replies={replies}",
        "algorithm.adv_estimator=reinforce_plus_plus", "trainer.total_epochs=2",
        "trainer.total_training_steps=2")
    trainer = PPOTrainer(cfg)
    try:
        history = trainer.fit()
    finally:
        trainer.close()
    assert [m["training/global_step"] for m in history] == [1.0, 2.0]
    mean = sum(scores) / len(scores)
    for metrics in history:
        assert metrics["critic/score/mean"] == pytest.approx(mean)
        assert (metrics["critic/score/max"], metrics["critic/score/min"]) == (max(scores), 0.0)
        assert metrics["rollout/tool_calls/guess_number"] == 8.0  # 4 rows x n=2, one call each
        assert metrics["actor/grad_norm"] > 0
