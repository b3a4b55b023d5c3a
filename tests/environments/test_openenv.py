"""OpenEnv episodes as verl rows, from a running server (URL) or an installed server app
(MODULE, started and stopped here): one reset per seed, train and test seeds apart, the
action and observation fields read from the server's schema. The test server's first
observation is the same for every seed (its number is hidden): it is refused unless
allow_shared_prompts, with which train and test share no number."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("openenv.core")

from agentrl.environments.openenv import prepare  # noqa: E402
from agentrl.environments.textarena import TEST_SEED_OFFSET  # noqa: E402
from agentrl.interactions.openenv_server import start_server  # noqa: E402

ENV_DIR = Path(__file__).parents[1] / "interactions"  # openenv_guess_env.py
FIRST = "I am thinking of a number from 1 to 20. Guess it."


@pytest.fixture
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ENV_DIR))
    monkeypatch.setenv("PYTHONPATH", str(ENV_DIR))


@pytest.fixture
def url(on_path):
    server = start_server("openenv_guess_env")
    yield server.base_url
    server.stop()


def test_rows_from_a_running_server(url):
    with pytest.raises(ValueError, match=f"openenv:{url}: its prompt does not change with the "
                                         "seed .*pass --allow-shared-prompts"):
        prepare(url, 3, 2, seed=4, answer_tag="move")
    train, test, extra = prepare(url, 3, 2, seed=4, answer_tag="move", allow_shared_prompts=True)
    assert [r["extra_info"]["interaction_kwargs"] for r in train] == [
        {"name": "openenv", "seed": s} for s in (4, 5, 6)]
    assert [r["extra_info"]["seed"] for r in test] == [TEST_SEED_OFFSET + 4, TEST_SEED_OFFSET + 5]
    row = train[0]
    assert row["data_source"] == "openenv/GuessEnvironment"  # the server's /metadata name
    assert row["prompt"][1] == {"role": "user", "content": FIRST}
    assert "<move></move>" in row["prompt"][0]["content"]
    (entry,) = extra["interaction"]["interaction"]
    assert entry["class_name"] == "agentrl.interactions.openenv.OpenEnvInteraction"
    assert entry["config"] == {"server": url, "action_field": "guess",
                               "observation_field": "message", "answer_tag": "move",
                               "timeout": 60.0}


def test_rows_from_a_module_whose_server_is_started_and_stopped(on_path, monkeypatch):
    import agentrl.environments.openenv as adapter

    started = []

    def recording(module, timeout):
        started.append(start_server(module, timeout))
        return started[-1]

    monkeypatch.setattr(adapter, "start_server", recording)
    train, test, extra = prepare("openenv_guess_env", 2, 1, seed=0, allow_shared_prompts=True)
    assert len(train) == 2 and len(test) == 1
    assert extra["interaction"]["interaction"][0]["config"]["server"] == "openenv_guess_env"
    assert started[0].process.poll() is not None  # stopped once the rows were read


def test_bad_targets_and_seeds_are_named(on_path):
    with pytest.raises(ValueError, match=r"openenv:http://127.0.0.1:9: .*Error"):
        prepare("http://127.0.0.1:9", 1, 1, seed=0)
    with pytest.raises(ValueError, match=r"(?s)openenv:no_such_env: .*no_such_env:app exited"):
        prepare("no_such_env", 1, 1, seed=0)
    with pytest.raises(ValueError, match="--seed must be >= 0"):
        prepare("openenv_guess_env", 1, 1, seed=-1)


def test_a_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openenv.core.env_client", None)
    with pytest.raises(ImportError, match=r"openenv:x needs the openenv-core package: "
                                          r"pip install 'agentrl\[envs\]'"):
        prepare("x", 1, 1, seed=0)
