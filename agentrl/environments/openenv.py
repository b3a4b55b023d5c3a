"""OpenEnv environment servers as verl rows (`agentrl env prepare openenv:URL|MODULE`).

``URL`` is a running server (``http://host:port``); ``MODULE`` an installed environment's
server app (``pkg.server.app`` or ``pkg.mod:attr``), started here for the rows and again by
the interaction at run time (`agentrl.interactions.openenv_server`). Each row is one
episode: a session reset with its own seed, its first observation as the prompt (under a
system prompt that asks for the action inside ``<answer></answer>``),
``interaction_kwargs = {"name": "openenv", "seed"}``, and ``data_source = openenv/<name>``
(the server's ``/metadata`` name; scored by the sum of the step rewards). Train and test
share no prompt, as for TextArena (`agentrl.environments.split`): a seed whose first
observation an earlier row has is skipped, so an environment whose first observation is
the same for every seed is refused, naming ``allow_shared_prompts``
(``--allow-shared-prompts``). With it an episode is its first observation and the session's
state after the reset (``/state`` less ``episode_id`` and ``step_count``: the setup an
environment keeps there, such as the number to guess), and train and test share no episode
but share their prompt; an environment whose every seed looks the same (it ignores its
seed, or keeps its setup where the client cannot see it) is refused either way.

How the model's move becomes an action, and the observation a user turn, is read from the
server's ``/schema`` and written into ``interaction.yaml`` (``action_field``,
``observation_field``), where it can be changed.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from agentrl.environments.split import draw_disjoint
from agentrl.interactions.openenv import (
    http_url,
    infer_fields,
    is_url,
    observation_text,
    open_episode,
    read_schemas,
    require_openenv,
)
from agentrl.interactions.openenv_server import start_server
from agentrl.utils.answer_tags import ANSWER_TAG

INTERACTION_NAME = "openenv"
TIMEOUT = 60.0  # seconds per call to the server while preparing
SYSTEM_PROMPT = (
    "You are acting in an environment. Each turn, reply with your action inside "
    "<answer></answer>; the environment answers with what happened."
)


def env_name(base_url: str, fallback: str) -> str:
    """The server's own name for its environment (``GET /metadata``), else ``fallback``."""
    try:
        name = httpx.get(f"{http_url(base_url)}/metadata", timeout=TIMEOUT).json().get("name")
    except (httpx.HTTPError, ValueError, AttributeError):
        name = None
    return name if isinstance(name, str) and name.strip() else fallback


def system_prompt(answer_tag: str, action_schema: dict[str, Any], action_field: str | None) -> str:
    system = SYSTEM_PROMPT.replace("<answer></answer>", f"<{answer_tag}></{answer_tag}>")
    if action_field is None:
        fields = ", ".join(sorted(set(action_schema.get("properties") or {}) - {"metadata"}))
        system += f" Write the action as a JSON object with the fields: {fields}."
    return system


def episode_key(first_text: str, state: Any) -> str:
    """What makes an episode this one: its first observation and its state less the
    session's own fields (a fresh ``episode_id`` each reset)."""
    setup = ({k: v for k, v in state.items() if k not in ("episode_id", "step_count")}
             if isinstance(state, dict) else state)
    return f"{first_text}\n{json.dumps(setup, sort_keys=True, default=repr)}"


def _episode(base_url: str, name: str, seed: int,
             observation_field: str | None) -> tuple[tuple[int, str], str, str]:
    """((seed, first observation's text), that text, the episode's key) of a session reset
    with ``seed``."""
    client, first = open_episode(base_url, seed, TIMEOUT)
    try:
        if first.done:
            raise ValueError(f"openenv {name}: the episode of seed {seed} is over at reset")
        text = observation_text(first.observation, observation_field)
        state = client.state()
    finally:
        client.close()
    return (seed, text), text, episode_key(text, state)


def make_rows(name: str, episodes: list[tuple[int, str]], split: str,
              system: str) -> list[dict[str, Any]]:
    """One row per (seed, first observation's text)."""
    return [{
        "data_source": f"openenv/{name}",
        "prompt": [{"role": "system", "content": system}, {"role": "user", "content": text}],
        "ability": "environment",
        "reward_model": {"style": "interaction", "ground_truth": ""},
        "extra_info": {
            "index": index, "split": split, "seed": seed,
            "interaction_kwargs": {"name": INTERACTION_NAME, "seed": seed},
        },
    } for index, (seed, text) in enumerate(episodes)]  # fmt: skip


def interaction_config(server: str, action_field: str | None, observation_field: str | None,
                       answer_tag: str = ANSWER_TAG) -> dict[str, Any]:
    """The interaction YAML's content for these rows."""
    return {"interaction": [{
        "name": INTERACTION_NAME,
        "class_name": "agentrl.interactions.openenv.OpenEnvInteraction",
        "config": {"server": server, "action_field": action_field,
                   "observation_field": observation_field, "answer_tag": answer_tag,
                   "timeout": TIMEOUT},
    }]}  # fmt: skip


def prepare(target: str, size: int, test_size: int, seed: int, answer_tag: str = ANSWER_TAG, *,
            allow_shared_prompts: bool = False
            ) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """(train rows, test rows, {"interaction": config}): no prompt in both, none twice (with
    `allow_shared_prompts`: no episode in both, none twice)."""
    if seed < 0:
        raise ValueError("--seed must be >= 0 (OpenEnv seeds are)")
    require_openenv(f"openenv:{target}")
    process = None
    try:
        process = None if is_url(target) else start_server(target, timeout=TIMEOUT)
        base_url = process.base_url if process else target
        schemas = read_schemas(base_url, TIMEOUT)
        action_field, observation_field = infer_fields(schemas)
        name = env_name(base_url, target.split(":")[0] if process else target)
        system = system_prompt(answer_tag, schemas["action"], action_field)
        episodes = draw_disjoint(
            f"openenv:{target}", lambda s: _episode(base_url, name, s, observation_field),
            size, test_size, seed, allow_shared_prompts=allow_shared_prompts)
        train, test = (make_rows(name, e, split, system)
                       for e, split in zip(episodes, ("train", "test"), strict=True))
    except (RuntimeError, OSError, httpx.HTTPError) as err:  # no server, or one that fails
        raise ValueError(f"openenv:{target}: {type(err).__name__}: {err}") from err
    finally:
        if process is not None:
            process.stop()
    config = interaction_config(target, action_field, observation_field, answer_tag)
    return train, test, {"interaction": config}


__all__ = ["episode_key", "interaction_config", "make_rows", "prepare"]
