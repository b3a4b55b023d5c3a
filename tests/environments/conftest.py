"""Every environment id `agentrl env prepare` accepts, prepared once per session with small
sizes: the split test (tests/environments/test_split.py) checks that train and test share no
item, the reasoning-gym sweep scores the same rows, so no task is made twice.

    every_id("textarena")   # {spec: (train rows, test rows) or the refusal's message}
    prepare_ids("openenv", ["openenv_guess_env"], allow_shared_prompts=True)

The ids are the ones the CLI takes: every reasoning-gym task (`reasoning_gym.factory.DATASETS`),
every TextArena id (`ENV_REGISTRY`, refused ones included), and the verifiers environments and
the OpenEnv server installed here (the test fixtures: nothing else is installed).
"""

from __future__ import annotations

import functools
import io
import random
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

import pytest

TESTS = Path(__file__).parents[1]
# (train, test) sizes: the reasoning-gym sweep scores 3 rows of each task
SIZES = {"reasoning_gym": (2, 1), "textarena": (1, 1), "verifiers": (2, 1), "openenv": (2, 2)}
# seeds whose puzzles TextArena makes fast (train seed S, test seed 1,000,000 + S): Sudoku's
# hard puzzles of seed 3 in 0.5 s (seed 0's in 17 s), Sokoban's medium ones of seed 0 in 5 s
# (of 52 seeds tried none took under 3 s for both; some take 90 s)
TEXTARENA_SEEDS = {"Sokoban-v0-medium": 0, "Sokoban-v0-medium-train": 0, "Sudoku-v0-hard": 3,
                   "Sudoku-v0-hard-train": 3}
VERIFIERS_ENVS = ("vf-adder", "vf-capitals", "vf-guess")  # tests/fixtures/vf_*.py
OPENENV_SERVERS = ("openenv_guess_env",)  # tests/interactions/openenv_guess_env.py


def openenv_target(seed: int) -> int:
    """The number openenv_guess_env draws for `seed`: its episode, which its prompt hides."""
    return random.Random(seed).randint(1, 20)


def accepted_ids(kind: str) -> list[str]:
    """The names of `kind` that `agentrl env prepare KIND:NAME` takes here."""
    if kind == "reasoning_gym":
        from reasoning_gym.factory import DATASETS

        return sorted(DATASETS)
    if kind == "textarena":
        from textarena.envs.registration import ENV_REGISTRY

        return sorted(ENV_REGISTRY)
    return list(VERIFIERS_ENVS if kind == "verifiers" else OPENENV_SERVERS)


def prepare_ids(kind: str, names: list[str], **options) -> dict[str, tuple[list, list] | str]:
    """{KIND:NAME: (train rows, test rows) or the refusal's message} for `names` of `kind`,
    at SIZES (`options`: the adapter's keyword options, allow_shared_prompts)."""
    from agentrl.environments.prepare import _adapter

    pytest.importorskip({"openenv": "openenv.core"}.get(kind, kind))
    size, test_size = SIZES[kind]
    out: dict[str, tuple[list, list] | str] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(TESTS / "fixtures"))
        patch.syspath_prepend(str(TESTS / "interactions"))
        patch.setenv("PYTHONPATH", str(TESTS / "interactions"))  # the server's child process
        if kind == "textarena":  # the word games download nltk's corpus: stay offline, and
            import nltk  # fail as they would without it (at once, not after the download)

            patch.setattr(nltk, "download", lambda name, *args, **kwargs: nltk.data.find(
                f"corpora/{name}"))
        for name in names:
            seed = TEXTARENA_SEEDS.get(name, 0) if kind == "textarena" else 0
            try:
                with redirect_stdout(io.StringIO()):  # RushHour prints its attempts
                    train, test, _ = _adapter(kind).prepare(name, size, test_size, seed,
                                                            **options)
            except ValueError as err:
                out[f"{kind}:{name}"] = str(err)
            else:
                out[f"{kind}:{name}"] = (train, test)
    return out


@pytest.fixture(scope="session")
def every_id() -> Callable[[str], dict[str, tuple[list, list] | str]]:
    """`every_id(kind)`: each accepted id of `kind` prepared (once a session) or refused."""
    return functools.cache(lambda kind: prepare_ids(kind, accepted_ids(kind)))
