"""A verifiers environment as the user: its environment responses between turns, its rubric
as the trajectory's reward.

Interaction YAML (``multi_turn.interaction_config_path``; ``agentrl env prepare
verifiers:ENV`` writes it)::

    interaction:
      - name: verifiers
        class_name: agentrl.interactions.verifiers.VerifiersInteraction
        config: {env: my-env}

Dataset row: ``extra_info.interaction_kwargs = {"name": "verifiers", "input": "<JSON>"}``,
the item of the environment's dataset (``prompt``, ``answer``, ``task``, ``info``,
``example_id``), whose prompt is the row's prompt.

It follows ``vf.MultiTurnEnv.rollout``: ``start_interaction`` makes the rollout's state
(``env.init_state``, ``env.setup_state``); after each model turn that calls no tool (tool
calls are the engine's, through ``agentrl.tools.verifiers.VerifiersTool``), the model's
turns so far become the state's trajectory and the environment's stop conditions are checked
(``env.is_completed``: ``max_turns``, no tool called, ...), and after turns that called
tools as well (``after_tool_turn``: a ``ToolEnv``'s ``max_turns`` ends an episode whose every
turn called a tool, as in verifiers' own rollout). While it goes on,
``env.env_response(messages, state)`` answers, its messages' text the next user turn (score
0.0); when it stops, or the response is the final one (``state["final_env_response"]``),
the rubric scores the rollout (``rubric.score_group([state])``) and the trajectory ends with
that reward as its last turn score, which the ``verifiers/<env>`` scorer hands to the
reward manager. A single-turn environment ends after the first reply.

The environment's coroutines run on the rollout's event loop (they are asyncio code); one
that raises, awaits past ``multi_turn.tool_timeout``, or answers with messages that are not
text fails only its trajectory, with the reason (counted in ``rollout/interaction_errors``).
"""

from __future__ import annotations

import json
from typing import Any

from agentrl.interactions.base import BaseInteraction
from agentrl.tools.verifiers import load_environment, message_text

MODEL_NAME = "agentrl"  # the state's model name: the rollout is agentrl's, not an API call


def openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """agentrl's messages in the OpenAI chat form verifiers reads (arguments as JSON text)."""
    out = []
    for message in messages:
        item = {"role": message["role"], "content": message.get("content") or ""}
        if message.get("tool_calls"):
            item["tool_calls"] = [{
                "id": call.get("id", ""), "type": "function",
                "function": {"name": call["function"]["name"],
                             "arguments": (args if isinstance(args, str)
                                           else json.dumps(args, ensure_ascii=False))},
            } for call in message["tool_calls"]
                for args in [call["function"].get("arguments", {})]]  # fmt: skip
        if message.get("tool_call_id"):
            item["tool_call_id"] = message["tool_call_id"]
        out.append(item)
    return out


def response_text(response: Any) -> str:
    """The environment's response messages as one user turn (ValueError if not text)."""
    if not isinstance(response, list) or not all(isinstance(m, dict) for m in response):
        raise ValueError(f"the verifiers environment's response is not a list of messages: "
                         f"{str(response)[:200]!r}")
    return "\n\n".join(message_text(m.get("content"), "the environment's response")
                       for m in response)


class VerifiersInteraction(BaseInteraction):
    """Config: ``env`` (the verifiers environment's id, required)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        env_id = self.config.get("env")
        if not isinstance(env_id, str) or not env_id:
            raise ValueError("the verifiers interaction needs config.env: the environment's id")
        self.env = load_environment(env_id)

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        if "input" not in kwargs:
            raise ValueError("a verifiers row needs interaction_kwargs.input (the dataset "
                             "item's JSON, as agentrl env prepare writes it)")
        instance_id = await super().start_interaction(instance_id, **kwargs)
        state = await self.env.init_state(json.loads(kwargs["input"]), None, MODEL_NAME)
        state = await self.env.setup_state(state)
        self._instance_dict[instance_id] = {"state": state}
        return instance_id

    def _record_turns(self, state: Any, conversation: list[dict[str, Any]]) -> None:
        """One trajectory step per model turn not yet in the state (as verifiers records)."""
        turns = [i for i, m in enumerate(conversation) if m["role"] == "assistant"]
        for i in turns[len(state["trajectory"]):]:
            state["trajectory"].append({
                "prompt": conversation[:i], "completion": [conversation[i]], "response": None,
                "tokens": None, "reward": None, "advantage": None, "is_truncated": False,
                "trajectory_id": state["trajectory_id"], "extras": {},
            })  # fmt: skip

    async def _score(self, state: Any, conversation: list[dict[str, Any]],
                     final: list[dict[str, Any]]) -> tuple[bool, str, float, dict[str, Any]]:
        state["completion"] = conversation[len(state["prompt"]):] + final
        await self.env.rubric.score_group([state])
        return True, "", float(state["reward"] or 0.0), dict(state.get("metrics") or {})

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        state = self._instance_dict[instance_id]["state"]
        conversation = openai_messages(messages)
        self._record_turns(state, conversation)
        if await self.env.is_completed(state):
            return await self._score(state, conversation, [])
        response = await self.env.env_response(conversation, state)
        text = response_text(response)
        if state.get("final_env_response") is not None:
            await self.env.is_completed(state)  # its stop bookkeeping and cleanup
            return await self._score(state, conversation, list(state["final_env_response"]))
        return False, text, 0.0, {}

    async def after_tool_turn(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, float, dict[str, Any]]:
        """The environment's stop conditions after a turn whose tool calls the engine ran (a
        ``ToolEnv``'s ``max_turns``): scored by the rubric on the turns up to that reply, as
        verifiers' own rollout stops there, before the tools' results."""
        state = self._instance_dict[instance_id]["state"]
        conversation = openai_messages(messages)
        self._record_turns(state, conversation)
        if not await self.env.is_completed(state):
            return False, 0.0, {}
        last = max(i for i, m in enumerate(conversation) if m["role"] == "assistant")
        _, _, score, metrics = await self._score(state, conversation[: last + 1], [])
        return True, score, metrics

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        entry = self._instance_dict.pop(instance_id, None)
        if entry is not None and not entry["state"].get("is_completed"):
            # a trajectory the rollout ended (turn limit, an error): the env's @vf.cleanup
            # handlers, which verifiers runs when a rollout stops or is cancelled
            await self.env._cleanup(entry["state"])


__all__ = ["VerifiersInteraction", "openai_messages", "response_text"]
