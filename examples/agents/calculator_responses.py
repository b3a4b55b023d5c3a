"""The calculator task as an agent written with OpenAI's Responses API, trained by agentrl.

Plain Responses-API code: each turn sends only what is new (the user's question, then the
``function_call_output`` items) and chains to the last answer with
``previous_response_id``; the gateway keeps the conversation per session, as OpenAI's
server does, and records every call token-exact (docs/gateway.md).

    agentrl train --config recipes/quickstart/config.yaml \\
        actor_rollout_ref.rollout.agent_function=examples/agents/calculator_responses.py:run \\
        actor_rollout_ref.rollout.multi_turn.enable=false \\
        actor_rollout_ref.model.path=MODEL data.train_files=TRAIN.parquet
"""

from __future__ import annotations

import json
import re
from typing import Any

from tools.calculator import CalculatorError, evaluate, format_result

CALCULATOR = {
    "type": "function",
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]},
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
    instructions = "\n".join(m["content"] for m in task["raw_prompt"] if m["role"] == "system")
    new_input: Any = [{"role": m["role"], "content": m["content"]}
                      for m in task["raw_prompt"] if m["role"] != "system"]
    previous = None
    text = ""
    for _ in range(MAX_TURNS):
        reply = await client.responses.create(
            model="policy", instructions=instructions or None, input=new_input,
            previous_response_id=previous, tools=[CALCULATOR], max_output_tokens=48)
        previous, text = reply.id, reply.output_text
        calls = [item for item in reply.output if item.type == "function_call"]
        if not calls:
            break
        new_input = [{"type": "function_call_output", "call_id": c.call_id,
                      "output": calculate(c.arguments)} for c in calls]
    found = ANSWER.findall(text)
    truth = str(task["reward_model"]["ground_truth"])
    return 1.0 if found and found[-1].strip() == truth else 0.0
