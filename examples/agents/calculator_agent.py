"""The calculator task as an agent written with the OpenAI client, trained by agentrl.

The agent is plain OpenAI-client code: it asks the model, runs the calculator itself when
the model calls it, feeds the result back, and scores the final answer. agentrl trains it
in agent mode (docs/gateway.md); the client it gets talks to the policy through the
in-process gateway, which records every call token-exact.

    agentrl train --config recipes/quickstart/config.yaml \\
        actor_rollout_ref.rollout.agent_function=examples/agents/calculator_agent.py:run \\
        actor_rollout_ref.rollout.multi_turn.enable=false \\
        actor_rollout_ref.model.path=MODEL data.train_files=TRAIN.parquet

The same function runs against any OpenAI-compatible server (`agentrl gateway`, vLLM,
OpenAI) with `asyncio.run(run(task, openai.AsyncOpenAI(base_url=...)))`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tools.calculator import CalculatorError, evaluate, format_result

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]},
    },
}
MAX_TURNS = 3
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def calculate(arguments: str) -> str:
    """The calculator's answer to a call's JSON arguments (errors as text for the model)."""
    try:
        expression = json.loads(arguments).get("expression", "")
        return format_result(evaluate(str(expression)))
    except (CalculatorError, ValueError, AttributeError) as err:
        return f"Error: {err}"


async def run(task: dict[str, Any], client: Any) -> float:
    """One episode: up to MAX_TURNS model turns; 1.0 for the right <answer>, else 0.0."""
    messages = list(task["raw_prompt"])
    message = None
    for _ in range(MAX_TURNS):
        reply = await client.chat.completions.create(
            model="policy", messages=messages, tools=[CALCULATOR], max_tokens=48)
        message = reply.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": calculate(call.function.arguments)})
    found = ANSWER.findall((message.content or "") if message is not None else "")
    truth = str(task["reward_model"]["ground_truth"])
    return 1.0 if found and found[-1].strip() == truth else 0.0
