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
trajectories, each game with its own stream of Python's ``random`` (``Game``: TextArena's
games draw from the process-wide one), so a seed and the moves fix the game; one that raises, hangs (``multi_turn.tool_timeout``) or returns an observation
that is not text fails only its trajectory, with the reason (the engine counts it in
``rollout/interaction_errors``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Iterator
from typing import Any

from agentrl.interactions.base import BaseInteraction
from agentrl.utils.answer_tags import answer_or_reply
from agentrl.utils.extras import missing_package

# TextArena's games seed and draw from the process-wide `random` module (its
# `State.__init__` calls `random.seed`): every call of a Game swaps in the game's own
# stream under this lock and puts the process's back (see Game).
_PROCESS_RANDOM = threading.Lock()


class Game:
    """One TextArena game for one player, with its own stream of Python's ``random``.

    Games played at once (the interaction runs each in a worker thread) would otherwise
    draw from one shared stream: a seed would not be one game (the first deal shown in a
    row's prompt could differ from the game then played, and every later card would depend
    on what the other games drew), and the process's own ``random`` would be reseeded by
    every reset. Here each call runs under a lock with the game's stream swapped in, so a
    seed and the moves played fix the game whatever runs beside it."""

    def __init__(self, env_id: str, seed: int) -> None:
        try:
            import textarena
        except ImportError as err:
            raise missing_package("textarena", "envs", f"the TextArena game {env_id}") from err
        self._random: object | None = None
        with self._own_random():
            try:
                self.env = textarena.make(env_id)
            except Exception as err:  # textarena raises plain exceptions for unknown ids
                raise ValueError(f"textarena:{env_id}: {err} (ids: textarena.envs."
                                 "registration.ENV_REGISTRY)") from err
            self.env.reset(num_players=1, seed=int(seed))
        self.first = self.observation()
        self._seen = len(self.first)

    @contextlib.contextmanager
    def _own_random(self) -> Iterator[None]:
        with _PROCESS_RANDOM:
            outer = random.getstate()
            if self._random is not None:
                random.setstate(self._random)  # type: ignore[arg-type]
            try:
                yield
            finally:
                self._random = random.getstate()
                random.setstate(outer)

    def observation(self) -> str:
        """Player 0's observation (the game's whole history) as text; ValueError when the
        game gives anything else."""
        with self._own_random():
            _, observation = self.env.get_observation()
        if not isinstance(observation, str):
            raise ValueError(f"the game's observation is {type(observation).__name__}, not "
                             f"text: {str(observation)[:200]!r}")
        return observation

    def step(self, move: str) -> bool:
        """Play `move`; True when the game is over."""
        with self._own_random():
            done, _ = self.env.step(move)
        return bool(done)

    def play(self, move: str) -> tuple[bool, str, float]:
        """Play `move`: (done, what the game said since the last move, player 0's reward
        when done else 0.0). The game's observation is its whole history, so the text is
        what is new (the whole observation if nothing is)."""
        if self.step(move):
            return True, "", self.close()
        observation = self.observation()
        new, self._seen = observation[self._seen :], len(observation)
        return False, new.strip() or observation, 0.0

    def close(self) -> float:
        """End the game; player 0's reward (0.0 when the game gives none)."""
        with self._own_random():
            rewards, _ = self.env.close()
        return float((rewards or {}).get(0, 0.0))


def make_game(env_id: str, seed: int) -> tuple[Game, str]:
    """A TextArena game reset for one player with ``seed``, and its first observation."""
    game = Game(env_id, seed)
    return game, game.first


def observation_text(game: Game) -> str:
    """Player 0's observation as text (ValueError when the game gives anything else)."""
    return game.observation()


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
        game, _ = await asyncio.to_thread(make_game, str(kwargs["env_id"]),
                                              int(kwargs["seed"]))
        self._instance_dict[instance_id] = {"game": game, "done": False}
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
        done, text, reward = state["game"].play(move)
        state["done"] = done
        return done, text, reward

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        state = self._instance_dict.pop(instance_id, None)
        if state is not None and not state["done"]:
            with contextlib.suppress(Exception):  # a game that cannot close is dropped anyway
                state["game"].close()


__all__ = ["Game", "TextArenaInteraction", "make_game", "observation_text"]
