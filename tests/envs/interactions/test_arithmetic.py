"""ArithmeticInteraction: checks answers with the data source's scorer, asks to retry."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.interactions.testing import check_interaction_contract
from envs.interactions.arithmetic import CORRECT, INCORRECT, ArithmeticInteraction


def answer(text: str) -> list[dict]:
    return [{"role": "user", "content": "3*4?"}, {"role": "assistant", "content": text}]


def test_contract_and_a_wrong_answer():
    report = asyncio.run(
        check_interaction_contract(
            ArithmeticInteraction({}), answer("<answer>13</answer>"), {"ground_truth": "12"}
        )
    )
    assert (report.should_terminate, report.response, report.score) == (False, INCORRECT, 0.0)


def test_retry_until_correct_then_terminate():
    interaction = ArithmeticInteraction({"name": "arithmetic"})

    async def episode():
        instance = await interaction.start_interaction("r1", ground_truth="12", name="arithmetic")
        first = await interaction.generate_response(instance, answer("<answer>11</answer>"))
        second = await interaction.generate_response(instance, answer("<answer>12.0</answer>"))
        score = await interaction.calculate_score(instance)
        await interaction.finalize_interaction(instance)
        return first, second, score

    first, second, score = asyncio.run(episode())
    assert first == (False, INCORRECT, 0.0, {"attempts": 1})
    assert second == (True, CORRECT, 1.0, {"attempts": 2})
    assert score == 1.0 and interaction._instance_dict == {}


def test_max_attempts_ends_the_episode():
    interaction = ArithmeticInteraction({"max_attempts": 2, "incorrect_text": "No."})

    async def episode():
        await interaction.start_interaction("r", ground_truth="5")
        return [
            await interaction.generate_response("r", answer("<answer>4</answer>")) for _ in range(2)
        ]

    assert [r[:2] for r in asyncio.run(episode())] == [(False, "No."), (True, "No.")]


def test_gsm8k_data_source():
    interaction = ArithmeticInteraction({})

    async def episode():
        await interaction.start_interaction("g", ground_truth="72", data_source="openai/gsm8k")
        return await interaction.generate_response("g", answer("so #### 72"))

    assert asyncio.run(episode())[:3] == (True, CORRECT, 1.0)


def test_missing_ground_truth_is_a_clear_error():
    with pytest.raises(ValueError, match="interaction_kwargs need a 'ground_truth'"):
        asyncio.run(ArithmeticInteraction({"name": "arithmetic"}).start_interaction("x"))
