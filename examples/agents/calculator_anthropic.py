"""The calculator task as an agent written with the Anthropic client, trained by agentrl.

Plain Messages-API code: it asks the model, runs the calculator itself for each
``tool_use`` block, sends the ``tool_result`` back, and scores the final answer. agentrl
trains it in agent mode with ``rollout.agent_client=anthropic``: the client it gets talks
to the policy through the in-process gateway's ``/v1/messages``, which records every call
token-exact (docs/gateway.md).

    agentrl train --config recipes/quickstart/config.yaml \\
        actor_rollout_ref.rollout.agent_function=examples/agents/calculator_anthropic.py:run \\
        actor_rollout_ref.rollout.agent_client=anthropic \\
        actor_rollout_ref.rollout.multi_turn.enable=false \\
        actor_rollout_ref.model.path=MODEL data.train_files=TRAIN.parquet
"""

from __future__ import annotations

import json
import re
from typing import Any

from tools.calculator import CalculatorError, evaluate, format_result

CALCULATOR = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}},
                     "required": ["expression"]},
}
MAX_TURNS = 3
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def calculate(arguments: dict[str, Any]) -> str:
    """The calculator's answer to a tool_use block's input (errors as text for the model)."""
    try:
        return format_result(evaluate(str(arguments.get("expression", ""))))
    except (CalculatorError, ValueError, AttributeError) as err:
        return f"Error: {err}"


async def run(task: dict[str, Any], client: Any) -> float:
    """One episode: up to MAX_TURNS model turns; 1.0 for the right <answer>, else 0.0."""
    system = "\n".join(m["content"] for m in task["raw_prompt"] if m["role"] == "system")
    messages = [{"role": m["role"], "content": m["content"]}
                for m in task["raw_prompt"] if m["role"] != "system"]
    text = ""
    for _ in range(MAX_TURNS):
        reply = await client.messages.create(model="policy", max_tokens=48, system=system,
                                             messages=messages, tools=[CALCULATOR])
        text = "".join(b.text for b in reply.content if b.type == "text")
        uses = [b for b in reply.content if b.type == "tool_use"]
        messages.append({"role": "assistant", "content": reply.content})
        if not uses:
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id,
             "content": calculate(u.input if isinstance(u.input, dict) else json.loads(u.input))}
            for u in uses]})  # fmt: skip
    found = ANSWER.findall(text)
    truth = str(task["reward_model"]["ground_truth"])
    return 1.0 if found and found[-1].strip() == truth else 0.0
