"""BaseInteraction: defaults, the abstract method, and the contract check on a user subclass."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.interactions import BaseInteraction
from agentrl.interactions.testing import check_interaction_contract


class Echo(BaseInteraction):
    async def generate_response(self, instance_id, messages, **kwargs):
        return False, f"you said: {messages[-1]['content']}", 0.5, {"turn": 1}


class Leaky(Echo):
    async def finalize_interaction(self, instance_id, **kwargs):
        return None  # forgets to free the state


class BadReturn(BaseInteraction):
    async def generate_response(self, instance_id, messages, **kwargs):
        return "just text"


def test_defaults():
    echo = Echo({"name": "echo", "x": 1})
    assert (echo.name, echo.config) == ("echo", {"name": "echo", "x": 1})
    assert Echo({}).name == "interaction_agent"
    instance = asyncio.run(echo.start_interaction(None, secret=3))
    assert echo._instance_dict[instance] == {"secret": 3}
    assert asyncio.run(echo.calculate_score(instance)) == 0.0
    asyncio.run(echo.finalize_interaction(instance))
    asyncio.run(echo.finalize_interaction("unknown"))  # a no-op
    assert echo._instance_dict == {}


def test_generate_response_is_abstract():
    with pytest.raises(TypeError, match="generate_response"):
        BaseInteraction({})  # type: ignore[abstract]


def test_contract_check_passes_and_reports():
    report = asyncio.run(
        check_interaction_contract(
            Echo({}), [{"role": "assistant", "content": "4"}], {"ground_truth": "4"}
        )
    )
    assert (report.should_terminate, report.response, report.score, report.metrics) == (
        False,
        "you said: 4",
        0.5,
        {"turn": 1},
    )


@pytest.mark.parametrize(
    "interaction, message",
    [
        (Leaky({}), "finalize_interaction did not free instance 'contract-check'"),
        (BadReturn({}), "generate_response returned 'just text'; expected (should_terminate"),
    ],
)
def test_contract_check_names_the_broken_rule(interaction, message):
    with pytest.raises(AssertionError, match=message.replace("(", r"\(")):
        asyncio.run(check_interaction_contract(interaction, [{"role": "user", "content": "x"}]))
