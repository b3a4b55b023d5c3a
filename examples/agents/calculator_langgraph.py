"""The calculator task as a LangGraph agent, trained by agentrl.

A two-node LangGraph graph: `model` asks the policy through the OpenAI client agentrl hands
the function, `tools` runs the calculator for each call the model made; the edge after
`model` goes to `tools` while there are calls, else to the end. agentrl trains it in agent
mode; every model call goes through the in-process gateway, which records it token-exact
(docs/gateway.md). Needs `pip install langgraph`.

    agentrl train --config recipes/quickstart/config.yaml \\
        actor_rollout_ref.rollout.agent_function=examples/agents/calculator_langgraph.py:run \\
        actor_rollout_ref.rollout.multi_turn.enable=false \\
        actor_rollout_ref.model.path=MODEL data.train_files=TRAIN.parquet
"""

# no `from __future__ import annotations`: LangGraph reads the State's annotations at run
# time, and this file is loaded by path (not importable by module name)
import json
import operator
import re
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

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
MAX_MODEL_TURNS = 3
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]  # each node appends
    model_turns: int


def calculate(arguments: str) -> str:
    """The calculator's answer to a call's JSON arguments (errors as text for the model)."""
    try:
        expression = json.loads(arguments).get("expression", "")
        return format_result(evaluate(str(expression)))
    except (CalculatorError, ValueError, AttributeError) as err:
        return f"Error: {err}"


def build_graph(client: Any) -> Any:
    """The compiled graph over `client` (an `openai.AsyncOpenAI`)."""

    async def model(state: State) -> dict[str, Any]:
        reply = await client.chat.completions.create(
            model="policy", messages=state["messages"], tools=[CALCULATOR], max_tokens=48)
        message = reply.choices[0].message.model_dump(exclude_none=True)
        return {"messages": [message], "model_turns": state["model_turns"] + 1}

    async def tools(state: State) -> dict[str, Any]:
        calls = state["messages"][-1].get("tool_calls") or []
        return {"messages": [{"role": "tool", "tool_call_id": c["id"],
                              "content": calculate(c["function"]["arguments"])}
                             for c in calls]}

    def after_model(state: State) -> str:
        calls = state["messages"][-1].get("tool_calls")
        return "tools" if calls and state["model_turns"] < MAX_MODEL_TURNS else END

    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", after_model, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile()


async def run(task: dict[str, Any], client: Any) -> float:
    """One episode through the graph; 1.0 for the right <answer>, else 0.0."""
    final = await build_graph(client).ainvoke(
        {"messages": [dict(m) for m in task["raw_prompt"]], "model_turns": 0})
    last = final["messages"][-1]
    found = ANSWER.findall(last.get("content") or "") if last.get("role") == "assistant" else []
    truth = str(task["reward_model"]["ground_truth"])
    return 1.0 if found and found[-1].strip() == truth else 0.0
