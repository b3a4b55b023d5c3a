"""An OpenEnv environment server as the user: each trajectory its own episode.

Interaction YAML (``multi_turn.interaction_config_path``; ``agentrl env prepare
openenv:URL|MODULE`` writes it)::

    interaction:
      - name: openenv
        class_name: agentrl.interactions.openenv.OpenEnvInteraction
        config:
          server: http://127.0.0.1:8000       # or a module: its app is started here
          action_field: message               # null: the move is the action as JSON
          observation_field: echoed_message   # null: the observation as JSON
          answer_tag: answer
          timeout: 60                         # seconds per reset / step

Dataset row: ``extra_info.interaction_kwargs = {"name": "openenv", "seed": 17}``; the row's
prompt is the first observation after ``reset(seed=17)``, so the episode the interaction
resets is the one the model saw (for an environment that uses its seed).

OpenEnv's protocol (openenv-core 0.2.0's ``EnvClient``, the same on later servers): one
WebSocket session per client at ``/ws``, a fresh environment instance on the server for
each, ``reset`` / ``step`` / ``close`` messages, each answered with ``{"observation": {...},
"reward": float | None, "done": bool}``. ``start_interaction`` opens a session and resets it
with the row's seed. After each model turn that calls no tool, the move (the answer tag's
text, else the whole reply) becomes the action: ``{action_field: move}``, or the move parsed
as a JSON object when the action has no single text field. An action that does not match the
environment's action schema (``GET /schema``) is the model's mistake: the next user turn
says why, score 0.0, and the episode goes on. Otherwise the step's observation text is the
next user turn, its reward (None: 0.0) the turn's score, and ``done`` ends the trajectory;
the ``openenv/<name>`` scorer sums the turn scores (the episode's return).

A ``server`` that is not a URL is an installed environment's server module (``pkg.mod`` or
``pkg.mod:attr``, uvicorn's app path, ``:app`` by default): this interaction starts it once
per process, when it is loaded, in a child process on a loopback port
(``agentrl.interactions.openenv_server``), and stops it at exit. The client's calls run in a worker thread with ``timeout``; a server
that raises, hangs, or answers with a malformed observation fails only its trajectory, with
the reason (the engine counts it in ``rollout/interaction_errors``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema

from agentrl.interactions.base import BaseInteraction
from agentrl.interactions.openenv_server import OpenEnvServer, start_server
from agentrl.utils.answer_tags import ANSWER_TAG, answer_or_reply
from agentrl.utils.extras import missing_package

# the fields every OpenEnv action / observation has besides its own
_ACTION_BASE = {"metadata"}
_OBSERVATION_BASE = {"done", "reward", "metadata"}


def is_url(server: str) -> bool:
    return server.startswith(("http://", "https://", "ws://", "wss://"))


def http_url(server: str) -> str:
    """The server's HTTP base URL (OpenEnv clients accept ws:// too)."""
    url = server.rstrip("/")
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if url.startswith(ws):
            return http + url[len(ws):]
    return url


@dataclass(frozen=True)
class Step:
    """One validated answer of the server: what ``reset`` and ``step`` return."""

    observation: dict[str, Any]
    reward: float | None
    done: bool


def parse_step(payload: Any) -> Step:
    """The server's answer, checked (ValueError naming what is malformed)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("observation"), dict):
        raise ValueError(f"malformed observation from the OpenEnv server (expected "
                         f"{{'observation': {{...}}, 'reward', 'done'}}): {str(payload)[:200]!r}")
    done, reward = payload.get("done", False), payload.get("reward")
    if not isinstance(done, bool):
        raise ValueError(f"malformed observation from the OpenEnv server: done is {done!r}, "
                         "not a bool")
    if reward is not None and (not isinstance(reward, int | float)
                               or not math.isfinite(float(reward))):
        raise ValueError(f"malformed observation from the OpenEnv server: reward is "
                         f"{reward!r}, not a number")
    return Step(payload["observation"], None if reward is None else float(reward), done)


def observation_text(observation: dict[str, Any], field: str | None) -> str:
    """The observation as a user turn: its ``field`` (must be text), else all of it as JSON."""
    if field is None:
        return json.dumps(observation, ensure_ascii=False, sort_keys=True, default=str)
    value = observation.get(field)
    if not isinstance(value, str):
        raise ValueError(f"malformed observation from the OpenEnv server: its {field!r} is "
                         f"{type(value).__name__}, not text: {str(observation)[:200]!r}")
    return value


def _is_text(schema: dict[str, Any]) -> bool:
    options = schema.get("anyOf", [schema])
    return any(o.get("type") == "string" for o in options) and all(
        o.get("type") in ("string", "null") for o in options)


def text_field(schema: dict[str, Any], base: set[str]) -> str | None:
    """The one text property of a JSON schema besides ``base`` (None: none, or several)."""
    own = {k: v for k, v in (schema.get("properties") or {}).items() if k not in base}
    texts = [name for name, prop in own.items() if _is_text(prop)]
    return texts[0] if len(own) == 1 and len(texts) == 1 else None


def read_schemas(base_url: str, timeout: float) -> dict[str, Any]:
    """``GET /schema``: the environment's action, observation and state JSON schemas."""
    response = httpx.get(f"{http_url(base_url)}/schema", timeout=timeout)
    response.raise_for_status()
    schemas = response.json()
    if not isinstance(schemas, dict) or not isinstance(schemas.get("action"), dict):
        raise ValueError(f"{base_url}/schema did not return the action's schema: "
                         f"{str(schemas)[:200]!r}")
    return schemas


def infer_fields(schemas: dict[str, Any]) -> tuple[str | None, str | None]:
    """(action field, observation field): each the one text field, if there is one."""
    return (text_field(schemas["action"], _ACTION_BASE),
            text_field(schemas.get("observation") or {}, _OBSERVATION_BASE))


def require_openenv(what: str = "an OpenEnv environment") -> None:
    """ImportError naming the extra when openenv-core is not installed."""
    _client_class(what)


def _client_class(what: str = "an OpenEnv environment") -> type:
    try:
        from openenv.core.client_types import StepResult
        from openenv.core.env_client import EnvClient
    except ImportError as err:
        raise missing_package("openenv-core", "envs", what) from err

    class Client(EnvClient):  # actions are plain dicts; answers checked by parse_step
        def _step_payload(self, action: dict[str, Any]) -> dict[str, Any]:
            return action

        def _parse_result(self, payload: dict[str, Any]) -> StepResult:
            step = parse_step(payload)
            return StepResult(step.observation, step.reward, step.done)

        def _parse_state(self, payload: dict[str, Any]) -> dict[str, Any]:
            return payload

    return Client


def open_episode(base_url: str, seed: int | None, timeout: float) -> tuple[Any, Step]:
    """A new session on the server, reset with ``seed``: (client, its first answer)."""
    client = _client_class()(base_url, connect_timeout_s=timeout, message_timeout_s=timeout)
    try:
        result = client.reset(**({} if seed is None else {"seed": int(seed)}))
    except BaseException:
        client.close()
        raise
    return client, Step(result.observation, result.reward, result.done)


def step_episode(client: Any, action: dict[str, Any]) -> Step:
    result = client.step(action)
    return Step(result.observation, result.reward, result.done)


class OpenEnvInteraction(BaseInteraction):
    """Config: ``server`` (URL or module, required), ``action_field``, ``observation_field``
    (null: JSON), ``answer_tag`` (default ``answer``; null: the whole reply), ``timeout``
    (seconds per call, default 60)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        server = self.config.get("server")
        if not isinstance(server, str) or not server.strip():
            raise ValueError("the openenv interaction needs config.server: the environment "
                             "server's URL or its module")
        self.server = server.strip()
        self.action_field = self.config.get("action_field")
        self.observation_field = self.config.get("observation_field")
        tag = self.config.get("answer_tag", ANSWER_TAG)
        self.answer_tag = None if tag in (None, "") else str(tag)
        self.timeout = float(self.config.get("timeout", 60.0))
        # a module's server starts with the interaction, so a bad one fails at load time
        self._process: OpenEnvServer | None = None
        if not is_url(self.server):
            self._process = start_server(self.server, timeout=max(self.timeout, 60.0))
        self.base_url = self._process.base_url if self._process else self.server
        self._action_schema: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def _action_schema_once(self) -> None:
        with self._lock:
            if self._action_schema is None:
                self._action_schema = read_schemas(self.base_url, self.timeout)["action"]

    def stop_server(self) -> None:
        """Stop the server this interaction started, if any (also done at exit)."""
        if self._process is not None:
            self._process.stop()

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        instance_id = await super().start_interaction(instance_id, **kwargs)
        await asyncio.to_thread(self._action_schema_once)
        client, first = await asyncio.to_thread(open_episode, self.base_url, kwargs.get("seed"),
                                                self.timeout)
        self._instance_dict[instance_id] = {"client": client, "done": first.done}
        return instance_id

    def move(self, reply: str) -> str:
        """The move in a model reply: the last answer tag's text, else the whole reply."""
        return answer_or_reply(reply, self.answer_tag)

    def action(self, move: str) -> tuple[dict[str, Any] | None, str]:
        """(the action, "") for a move, or (None, why it is not one of the environment's)."""
        if self.action_field is not None:
            action: Any = {self.action_field: move}
        else:
            try:
                action = json.loads(move)
            except json.JSONDecodeError as err:
                return None, f"Invalid action: not JSON ({err})."
        try:
            jsonschema.validate(action, self._action_schema or {})
        except jsonschema.ValidationError as err:
            return None, f"Invalid action: {err.message}."
        return action, ""

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        state = self._instance_dict[instance_id]
        if state["done"]:  # the episode ended at reset
            return True, "", 0.0, {}
        reply = next((m.get("content") or "" for m in reversed(messages)
                      if m.get("role") == "assistant"), "")  # fmt: skip
        action, why = self.action(self.move(str(reply)))
        if action is None:
            return False, why, 0.0, {"invalid_action": 1}
        step = await asyncio.to_thread(step_episode, state["client"], action)
        text = observation_text(step.observation, self.observation_field)
        state["done"] = step.done
        return step.done, text, step.reward or 0.0, {}

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        state = self._instance_dict.pop(instance_id, None)
        if state is not None:
            with contextlib.suppress(Exception):  # the session ends with the connection anyway
                await asyncio.to_thread(state["client"].close)


__all__ = ["OpenEnvInteraction", "Step", "http_url", "infer_fields", "is_url",
           "observation_text", "open_episode", "parse_step", "read_schemas", "require_openenv",
           "step_episode", "text_field"]
