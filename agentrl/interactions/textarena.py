"""A TextArena single-player game as the user: each model turn is a move, the game answers.

Interaction YAML (``multi_turn.interaction_config_path``; ``agentrl env prepare
textarena:ENV_ID`` writes it)::

    interaction:
      - name: textarena
        class_name: agentrl.interactions.textarena.TextArenaInteraction
        config: {answer_tag: answer}

Dataset row: ``extra_info.interaction_kwargs = {"name": "textarena", "env_id":
"GuessTheNumber-v0", "seed": 17}``; the row's prompt is the game's first observation after
``reset(num_players=1, seed=seed)``, so the interaction's game (reset the same way) is the
one the model saw.

After each model turn that calls no tool, the move is the last ``<answer>...</answer>`` of
the reply (the game's own format inside it, e.g. ``[7]``), or the whole reply when there is
no tag; it goes to ``env.step``. While the game goes on, the next user message is what the
game said since the move (its new observation, hints and invalid-move notices included) with
score 0.0; when it ends, the trajectory ends with the game's own reward for player 0
(``env.close()``), which the ``textarena/<env_id>`` scorer hands to the reward manager.
The game's calls run in a worker thread, so a slow game does not stall the other
trajectories; one that raises, hangs (``multi_turn.tool_timeout``) or returns an observation
that is not text fails only its trajectory, with the reason (the engine counts it in
``rollout/interaction_errors``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agentrl.interactions.base import BaseInteraction
from agentrl.utils.answer_tags import answer_or_reply
from agentrl.utils.extras import missing_package


def make_game(env_id: str, seed: int) -> tuple[Any, str]:
    """A TextArena game reset for one player with ``seed``, and its first observation."""
    try:
        import textarena
    except ImportError as err:
        raise missing_package("textarena", "envs", f"the TextArena game {env_id}") from err
    try:
        env = textarena.make(env_id)
    except Exception as err:  # textarena raises plain exceptions for unknown ids
        raise ValueError(f"textarena:{env_id}: {err} (ids: textarena.envs.registration."
                         "ENV_REGISTRY)") from err
    env.reset(num_players=1, seed=int(seed))
    return env, observation_text(env)


def observation_text(env: Any) -> str:
    """Player 0's observation as text (ValueError when the game gives anything else)."""
    _, observation = env.get_observation()
    if not isinstance(observation, str):
        raise ValueError(f"the game's observation is {type(observation).__name__}, not text: "
                         f"{str(observation)[:200]!r}")
    return observation


class TextArenaInteraction(BaseInteraction):
    """Config: ``answer_tag`` (default ``answer``: the move is the tag's text; null: the whole
    reply)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        tag = self.config.get("answer_tag", "answer")
        self.answer_tag = None if tag in (None, "") else str(tag)

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        for key in ("env_id", "seed"):
            if key not in kwargs:
                raise ValueError(f"a textarena row needs interaction_kwargs.{key}")
        instance_id = await super().start_interaction(instance_id, **kwargs)
        env, first = await asyncio.to_thread(make_game, str(kwargs["env_id"]), int(kwargs["seed"]))
        self._instance_dict[instance_id] = {"env": env, "seen": len(first), "done": False}
        return instance_id

    def move(self, reply: str) -> str:
        """The move in a model reply: the last answer tag's text, else the whole reply."""
        return answer_or_reply(reply, self.answer_tag)

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        state = self._instance_dict[instance_id]
        reply = next((m.get("content") or "" for m in reversed(messages)
                      if m.get("role") == "assistant"), "")  # fmt: skip
        done, text, reward = await asyncio.to_thread(self._play, state, self.move(str(reply)))
        return done, text, reward, {}

    @staticmethod
    def _play(state: dict[str, Any], move: str) -> tuple[bool, str, float]:
        env = state["env"]
        done, _ = env.step(move)
        if done:
            rewards, _ = env.close()
            state["done"] = True
            return True, "", float((rewards or {}).get(0, 0.0))
        observation = observation_text(env)
        # the game's observation is its whole history: the user turn is what is new
        new, state["seen"] = observation[state["seen"]:], len(observation)
        return False, new.strip() or observation, 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        state = self._instance_dict.pop(instance_id, None)
        if state is not None and not state["done"]:
            with contextlib.suppress(Exception):  # a game that cannot close is dropped anyway
                state["env"].close()


__all__ = ["TextArenaInteraction", "make_game", "observation_text"]
