"""A small OpenEnv environment for the OpenEnv tests, served by openenv-core's own server
(`create_app`): guess a number from 1 to 20 drawn from the reset's seed.

Each wrong guess answers "higher" or "lower" with reward -0.1; the right one ends the
episode with reward 1.0; the sixth wrong guess ends it with reward 0.0. Guesses that break
it on purpose: "raise" (step raises), "hang" (step sleeps 3 s, past the tests' 1 s timeout),
"garble" (the observation's message is null, not text).

    python -m uvicorn openenv_guess_env:app      # from this directory
"""

from __future__ import annotations

import random
import time
import uuid

from openenv.core.env_server import Action, Environment, Observation, State, create_app

MAX_GUESSES = 6


class GuessAction(Action):
    guess: str


class GuessObservation(Observation):
    message: str | None = None


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True  # no state shared between instances

    def __init__(self) -> None:
        super().__init__()
        self.target, self.guesses, self._state = 0, 0, State()

    def reset(self, seed=None, episode_id=None, **kwargs) -> GuessObservation:
        self.target = random.Random(seed).randint(1, 20)
        self.guesses = 0
        # the number in the state, where a client (agentrl env prepare) tells episodes apart
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0,
                            target=self.target)
        return GuessObservation(message="I am thinking of a number from 1 to 20. Guess it.")

    def step(self, action: GuessAction, timeout_s=None, **kwargs) -> GuessObservation:
        self._state.step_count += 1
        if action.guess == "raise":
            raise RuntimeError("the number machine broke")
        if action.guess == "hang":
            time.sleep(3)
        if action.guess == "garble":
            return GuessObservation(message=None)
        try:
            guess = int(action.guess)
        except ValueError:
            return GuessObservation(message=f"{action.guess!r} is not a number.", reward=0.0)
        self.guesses += 1
        if guess == self.target:
            return GuessObservation(message="Correct!", reward=1.0, done=True)
        if self.guesses >= MAX_GUESSES:
            return GuessObservation(message=f"Out of guesses; it was {self.target}.",
                                    reward=0.0, done=True)
        hint = "higher" if guess < self.target else "lower"
        return GuessObservation(message=f"{guess} is wrong: go {hint}.", reward=-0.1)

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess_number",
                 max_concurrent_envs=64)
