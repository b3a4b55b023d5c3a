"""The calculator task as an OpenAI Agents SDK agent (`pip install openai-agents`), trained
by agentrl.

The agent is ordinary Agents SDK code: an `Agent` with a calculator `FunctionTool`, run by
`Runner.run`. The only line that knows about agentrl is the model: the SDK's chat-completions
model over the client agentrl hands the function, which reaches the policy through the
in-process gateway (docs/gateway.md). The SDK runs the tool and calls the model again until
it answers; every call is recorded token-exact for training.

    agentrl train --config recipes/quickstart/config.yaml \\
        actor_rollout_ref.rollout.agent_function=examples/agents/calculator_agents_sdk.py:run \\
        actor_rollout_ref.rollout.multi_turn.enable=false \\
        actor_rollout_ref.model.path=MODEL data.train_files=TRAIN.parquet

Against any OpenAI-compatible server (`agentrl gateway`, vLLM, OpenAI):
`asyncio.run(run(task, openai.AsyncOpenAI(base_url=...)))`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
)
from agents.exceptions import MaxTurnsExceeded

from tools.calculator import CalculatorError, evaluate, format_result

MAX_TURNS = 3  # model calls per episode, as the OpenAI-client example
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# The schema the quickstart's model was fine-tuned on (recipes/quickstart/calculator_tool.yaml)
PARAMETERS = {"type": "object", "properties": {"expression": {"type": "string"}},
              "required": ["expression"]}


async def _calculate(_context: Any, arguments: str) -> str:
    """The calculator's answer to a call's JSON arguments (errors as text for the model)."""
    try:
        return format_result(evaluate(str(json.loads(arguments).get("expression", ""))))
    except (CalculatorError, ValueError, AttributeError) as err:
        return f"Error: {err}"


CALCULATOR = FunctionTool(
    name="calculator", description="Evaluate an arithmetic expression.",
    params_json_schema=PARAMETERS, on_invoke_tool=_calculate, strict_json_schema=False,
)


async def run(task: dict[str, Any], client: Any) -> float:
    """One episode: 1.0 for the right <answer>, else 0.0 (also when turns run out)."""
    messages = [dict(m) for m in task["raw_prompt"]]
    agent = Agent(
        name="calculator",
        model=OpenAIChatCompletionsModel(model="policy", openai_client=client),
        model_settings=ModelSettings(max_tokens=48),
        tools=[CALCULATOR],
    )
    try:
        result = await Runner.run(agent, messages, max_turns=MAX_TURNS,
                                  run_config=RunConfig(tracing_disabled=True))
    except MaxTurnsExceeded:
        return 0.0
    found = ANSWER.findall(str(result.final_output or ""))
    truth = str(task["reward_model"]["ground_truth"])
    return 1.0 if found and found[-1].strip() == truth else 0.0
