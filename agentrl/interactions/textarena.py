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

Only single-player games are played (their state is TextArena's ``SinglePlayerState``). A
game that is not, that cannot be made here (a missing nltk corpus, a package it imports, an
API key it needs, code this Python cannot compile) or an id TextArena does not register is a
ValueError saying which, so ``agentrl env prepare`` refuses it (exit 2) before any row.
The reward at the end is read as ``game_reward`` reads it: TextArena 0.7.4's Countdown,
Cryptarithm and Slitherlink pass ``set_invalid_move`` its arguments swapped, so a game lost
by invalid moves closes with the message as the reward and the reward (the game's progress)
as the reason; the progress is the reward then, never an interaction error.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
import random
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from agentrl.interactions.base import BaseInteraction
from agentrl.utils.answer_tags import ANSWER_TAG, answer_or_reply
from agentrl.utils.extras import missing_package

# TextArena's games seed and draw from the process-wide `random` module (its
# `State.__init__` calls `random.seed`): every call of a Game swaps in the game's own
# stream under this lock and puts the process's back (see Game).
_PROCESS_RANDOM = threading.Lock()

logger = logging.getLogger(__name__)


def _why_not_made(env_id: str, err: Exception, registry: Mapping[str, Any]) -> str:
    """Why `textarena.make(env_id)` failed, in words a user can act on."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))  # nltk colours the resource name
    if env_id not in registry:
        close = difflib.get_close_matches(env_id, list(registry), n=5, cutoff=0.6)
        return (f"TextArena has no game {env_id!r}"
                + (f"; did you mean {', '.join(close)}?" if close else "")
                + f" ({len(registry)} ids: textarena.envs.registration.ENV_REGISTRY)")
    corpus = re.search(r"Resource\W+(\w+)\W+not found", text)
    if isinstance(err, LookupError) and corpus:
        return (f"it needs the nltk corpus {corpus[1]!r}, which is not installed here "
                f"(python -m nltk.downloader {corpus[1]})")
    if isinstance(err, SyntaxError):
        where = f"{err.filename}:{err.lineno}" if err.filename else "its code"
        return (f"its code does not compile on Python {sys.version_info.major}."
                f"{sys.version_info.minor} (SyntaxError: {err.msg} at {where}; a newer Python "
                "may take it)")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"it cannot be made here ({type(err).__name__}: {first[:300]})"


def _single_player_env(textarena: Any, env_id: str, seed: int) -> Any:
    """`textarena.make(env_id)` reset for one player; ValueError saying why not."""
    from textarena.envs.registration import ENV_REGISTRY
    from textarena.state import SinglePlayerState

    try:
        env = textarena.make(env_id)
    except Exception as err:  # textarena raises what the game's import or constructor raised
        raise ValueError(f"textarena:{env_id}: {_why_not_made(env_id, err, ENV_REGISTRY)}") from err
    try:
        env.reset(num_players=1, seed=int(seed))
    except Exception as err:  # multi-player games assert their player count
        raise ValueError(f"textarena:{env_id} cannot be reset for one player "
                         f"({type(err).__name__}: {err}); agentrl plays single-player games "
                         "only") from err
    state = getattr(env, "state", None)
    if not isinstance(state, SinglePlayerState):
        raise ValueError(f"textarena:{env_id} is not a single-player game (its state is "
                         f"{type(state).__name__}, for {getattr(state, 'num_players', '?')} "
                         "players as made); agentrl plays single-player games only")
    return env


def game_reward(closed: Any) -> float:
    """Player 0's reward in what a game's ``close()`` returned: ``(rewards, game_info)`` or
    the rewards alone; 0.0 when there is none. A reward that is not a number is the swapped
    ``set_invalid_move`` of the module docstring: the number in ``game_info[0]["reason"]``
    (``"Invalid Move: 0.57"``) is the reward, else 0.0 with a warning."""
    rewards, info = closed if isinstance(closed, tuple) and len(closed) == 2 else (closed, None)
    value = rewards.get(0) if isinstance(rewards, Mapping) else rewards
    if value is None:
        return 0.0
    with contextlib.suppress(TypeError, ValueError):
        return float(value)
    reason = ((info or {}).get(0) or {}).get("reason") if isinstance(info, Mapping) else None
    swapped = re.fullmatch(r"Invalid Move: (\S+)", str(reason or ""))
    if swapped:
        with contextlib.suppress(ValueError):
            return float(swapped[1])
    logger.warning("a TextArena game closed with reward %.200r for player 0, not a number; "
                   "scored 0.0", value)
    return 0.0


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
            self.env = _single_player_env(textarena, env_id, seed)
        try:
            self.first = self.observation()
        except Exception as err:  # a wrapper that raises, a raw observation (a list)
            hint = ("; a -raw id gives the game's messages unrendered: use the id without "
                    "-raw") if env_id.endswith("-raw") else ""
            raise ValueError(f"textarena:{env_id}: {err}{hint}") from err
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
            closed = self.env.close()
        return game_reward(closed)


def make_game(env_id: str, seed: int) -> tuple[Game, str]:
    """A TextArena game reset for one player with ``seed``, and its first observation."""
    game = Game(env_id, seed)
    return game, game.first


def game_observation(game: Game) -> str:
    """Player 0's observation as text (ValueError when the game gives anything else)."""
    return game.observation()


class TextArenaInteraction(BaseInteraction):
    """Config: ``answer_tag`` (default ``answer``: the move is the tag's text; null: the whole
    reply)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        tag = self.config.get("answer_tag", ANSWER_TAG)
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


__all__ = ["Game", "TextArenaInteraction", "game_observation", "game_reward", "make_game"]
