"""VerifiersInteraction against real verifiers environments (tests/fixtures/vf_*.py): a
single-turn one scored by its rubric after the reply, a multi-turn one answering each move
until its stop condition, its rubric's reward at the end; one that raises, hangs or answers
with something that is not text fails the trajectory with the reason."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("verifiers")

from agentrl.environments.verifiers import prepare  # noqa: E402
from agentrl.interactions.testing import check_interaction_contract  # noqa: E402
from agentrl.interactions.verifiers import VerifiersInteraction, openai_messages  # noqa: E402
from agentrl.rollout import AsyncRolloutEngine  # noqa: E402
from agentrl.testing.rollout import (  # noqa: E402
    ConversationScriptBackend,
    prompts_batch,
    rollout_config,
    run_batch,
)
from agentrl.tools import OpenAIFunctionToolSchema  # noqa: E402
from agentrl.tools.verifiers import VerifiersTool, load_environment  # noqa: E402

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def _rows(env_id):
    train, _, _ = prepare(env_id, 4, 2, seed=0)
    return train


async def _play(interaction, row, moves, instance="t"):
    """Each move as a model turn; returns (outcomes, the conversation)."""
    kwargs = row["extra_info"]["interaction_kwargs"]
    await interaction.start_interaction(instance, **kwargs)
    messages, outcomes = list(row["prompt"]), []
    try:
        for move in moves:
            messages.append({"role": "assistant", "content": f"<answer>{move}</answer>"})
            outcomes.append(await interaction.generate_response(instance, messages))
            if outcomes[-1][0]:
                break
            messages.append({"role": "user", "content": outcomes[-1][1]})
    finally:
        await interaction.finalize_interaction(instance)
    return outcomes


@pytest.mark.parametrize(("right", "score"), [(True, 1.0), (False, 0.0)])
def test_a_single_turn_reply_is_scored_by_the_rubric(right, score):
    row = _rows("vf-capitals")[0]
    answer = row["reward_model"]["ground_truth"] if right else "Atlantis"
    (outcome,) = asyncio.run(_play(VerifiersInteraction({"env": "vf-capitals"}), row, [answer]))
    assert outcome[:3] == (True, "", score) and outcome[3]["right_capital"] == score


def test_a_multi_turn_environment_answers_each_move_and_its_rubric_ends_it():
    import vf_guess

    row = _rows("vf-guess")[1]
    target = int(json.loads(row["extra_info"]["interaction_kwargs"]["input"])["answer"])
    low, high, moves = 1, 20, []
    while True:  # the moves binary search would make
        guess = (low + high) // 2
        moves.append(guess)
        if guess == target:
            break
        low, high = (guess + 1, high) if guess < target else (low, guess - 1)
    outcomes = asyncio.run(_play(VerifiersInteraction({"env": "vf-guess"}), row, moves))
    hints = [o[1] for o in outcomes[:-1]]
    assert all(o[0] is False and o[2] == 0.0 for o in outcomes[:-1])
    assert all(h.startswith(f"{m} is wrong: go ") for h, m in zip(hints, moves, strict=False))
    assert outcomes[-1][:3] == (True, "", pytest.approx(1.0 - 0.1 * (len(moves) - 1)))
    assert outcomes[-1][3]["num_turns"] == len(moves)  # the env's own metric, from the state
    assert len(vf_guess.CLEANED) >= 1  # the env's cleanup ran when it stopped


def test_the_environments_max_turns_ends_the_episode_with_its_reward():
    outcomes = asyncio.run(_play(VerifiersInteraction({"env": "vf-guess"}),
                                 _rows("vf-guess")[0], ["nope"] * 10))
    assert len(outcomes) == 8 and outcomes[-1][:3] == (True, "", 0.0)  # max_turns=8


def test_a_trajectory_the_rollout_ends_early_is_cleaned_up():
    import vf_guess

    row = _rows("vf-guess")[0]
    wrong = 21 - int(json.loads(row["extra_info"]["interaction_kwargs"]["input"])["answer"])
    before = len(vf_guess.CLEANED)
    outcomes = asyncio.run(_play(VerifiersInteraction({"env": "vf-guess"}), row, [wrong]))
    assert outcomes[0][0] is False  # the rollout stopped before the environment did
    assert len(vf_guess.CLEANED) == before + 1


@pytest.mark.parametrize(("move", "error", "match"), [
    ("raise", Exception, "the number machine broke"),
    ("garble", ValueError, "the environment's response is dict, not text"),
])
def test_an_environment_that_raises_or_garbles_fails_the_trajectory(move, error, match):
    interaction = VerifiersInteraction({"env": "vf-guess"})
    with pytest.raises(error, match=match):
        asyncio.run(_play(interaction, _rows("vf-guess")[0], [move]))
    assert interaction._instance_dict == {}


def test_a_hanging_environment_is_cut_by_the_engines_timeout():
    from agentrl.utils.aio import within

    interaction = VerifiersInteraction({"env": "vf-guess"})
    with pytest.raises(TimeoutError):
        asyncio.run(within(_play(interaction, _rows("vf-guess")[0], ["hang"]), 0.5))


def test_tool_calls_reach_verifiers_in_openai_form():
    messages = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0_0", "type": "function",
         "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
        {"role": "tool", "name": "add", "content": "3", "tool_call_id": "call_0_0"}]
    assert openai_messages(messages) == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0_0", "type": "function",
             "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "content": "3", "tool_call_id": "call_0_0"}]


def test_the_contract_check_passes_and_bad_rows_are_named():
    row = _rows("vf-capitals")[0]
    report = asyncio.run(check_interaction_contract(
        VerifiersInteraction({"env": "vf-capitals"}),
        [*row["prompt"], {"role": "assistant", "content": "<answer>x</answer>"}],
        row["extra_info"]["interaction_kwargs"]))
    assert (report.should_terminate, report.score) == (True, 0.0)
    with pytest.raises(ValueError, match="interaction_kwargs.input"):
        asyncio.run(VerifiersInteraction({"env": "vf-capitals"}).start_interaction("x"))
    with pytest.raises(ValueError, match="config.env"):
        VerifiersInteraction({})


@pytest.mark.parametrize("between", ["", "\n"])
def test_the_environment_sees_the_tool_calls_the_engine_ran(tiny_tokenizer, between):
    """Two calls written back to back (no newline between, which the template writes) run,
    and the environment's rubric sees both in the turn's tool_calls: its ToolEnv counts two
    calls of add, as it counts them when the model spaces them as the template does."""
    row = _rows("vf-adder")[0]
    interaction = VerifiersInteraction({"env": "vf-adder"})
    seen = []
    respond = interaction.generate_response

    async def recorded(instance_id, messages, **kwargs):
        seen.append(await respond(instance_id, messages, **kwargs))
        return seen[-1]

    interaction.generate_response = recorded
    schema = OpenAIFunctionToolSchema.model_validate(load_environment("vf-adder").oai_tools[0])
    add = VerifiersTool({"env": "vf-adder"}, schema)
    a, b = (int(n) for n in row["prompt"][-1]["content"].split("What is ")[1][:-1].split(" + "))
    calls = [json.dumps({"name": "add", "arguments": {"a": x, "b": y}}) for x, y in [(a, b), (1, 2)]]
    turn = between.join(f"<tool_call>\n{c}\n</tool_call>" for c in calls) + "<|im_end|>"
    script = {0: [turn, f"<answer>{a + b}</answer><|im_end|>"]}
    prompt = [*row["prompt"][:-1], {"role": "user", "content": row["prompt"][-1]["content"]
                                    + " (conv-0)"}]  # the script's key  # fmt: skip
    batch = prompts_batch(1, tools_kwargs={"add": {}}, raw_prompt=[prompt],
                          interaction_kwargs=[row["extra_info"]["interaction_kwargs"]])
    engine = AsyncRolloutEngine(rollout_config("n=1"), tiny_tokenizer,
                                ConversationScriptBackend(tiny_tokenizer, script), {"add": add},
                                {"verifiers": interaction})  # fmt: skip
    requests = []
    run_batch(engine, batch, requests)
    (req,) = requests
    assert [m["content"] for m in req.messages if m["role"] == "tool"] == [str(a + b), "3"]
    ((done, _, score, metrics),) = seen
    assert (done, score) == (True, 1.0)
    assert (metrics["total_tool_calls"], metrics["add_calls"]) == (2.0, 2.0)
