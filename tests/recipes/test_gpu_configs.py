"""GPU recipes cannot rot silently: their configs and the overrides their scripts pass are
checked against the config schema here, on CPU, in every test run.

- every ``recipes/*/gpu*.yaml`` loads with ``load_config`` plus the paths a script adds
  (every key exists, every value type-checks, batch sizes agree), and the tool config it
  names loads with the tool loader;
- every ``recipes/*/run_gpu*.sh`` is read as text: each command line with ``--config FILE``
  gives its ``key.sub=value`` arguments, which must load on top of FILE. Shell variables
  take the value the script assigns them (``NAME=${NAME:-default}`` gives the default), and
  what only the run can know (arguments, command output) becomes a ``/placeholder/NAME``
  string, so a typed key must get its value from a literal or a default in the script.
  FILE is resolved from the repository root (scripts ``cd`` there) or the script's folder.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agentrl.config import load_config
from agentrl.tools.loader import load_tools

REPO = Path(__file__).resolve().parents[2]
GPU_CONFIGS = sorted(REPO.glob("recipes/*/gpu*.yaml"))
GPU_SCRIPTS = sorted(REPO.glob("recipes/*/run_gpu*.sh"))
SCRIPT_PATHS = [  # what a run script adds to a GPU config
    "actor_rollout_ref.model.path=/placeholder/model",
    "data.train_files=/placeholder/train.parquet",
    "data.val_files=/placeholder/test.parquet",
]

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=(.*)$")
_OVERRIDE = re.compile(r"^\+{0,2}[A-Za-z_]\w*(?:\.\w+)+=")
_VARIABLE = re.compile(r"\$\{(\w+)(\[[^\]]*\])?(?::?[-=]([^}]*))?\}|\$(\w+|[@*#?$!])")


def logical_lines(text: str) -> list[str]:
    """The script's lines with backslash continuations joined and comment lines dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        if not current and raw.lstrip().startswith("#"):
            continue
        if raw.endswith("\\"):
            current += raw[:-1] + " "
            continue
        lines.append(current + raw)
        current = ""
    if current:
        lines.append(current)
    return lines


def expand(text: str, env: dict[str, str]) -> str:
    """Shell variables of ``text`` replaced by their values in ``env``, their defaults, or
    ``/placeholder/NAME``; ``$@`` (the user's own arguments) by nothing."""

    def value(match: re.Match) -> str:
        name, index, default, bare = match.groups()
        name = name or bare
        if name in "@*":
            return ""
        if index is None and name in env:
            return env[name]
        if default is not None:
            return expand(default, env)
        return f"/placeholder/{name}"

    return _VARIABLE.sub(value, text)


def script_assignments(lines: list[str]) -> dict[str, str]:
    """``NAME=value`` assignments in order (later ones win); values the run computes
    (command substitutions, several words) are left out, so they become placeholders."""
    env: dict[str, str] = {}
    for line in lines:
        match = _ASSIGNMENT.match(line)
        if not match:
            continue
        name, raw = match.groups()
        words = None
        if "$(" not in raw and "`" not in raw:
            with contextlib.suppress(ValueError):  # unbalanced quotes: not a plain assignment
                words = shlex.split(expand(raw, env), comments=True)
        if words is not None and len(words) == 1:
            env[name] = words[0]
        else:
            env.pop(name, None)
    return env


def train_commands(script: Path) -> list[tuple[Path, list[str]]]:
    """``(config file, overrides)`` of every command line of ``script`` with ``--config``."""
    lines = logical_lines(script.read_text())
    env = script_assignments(lines)
    commands = []
    for line in lines:
        if "--config" not in line:
            continue
        words = shlex.split(expand(line, env), comments=True)
        at = words.index("--config")
        name = words[at + 1]
        config = next(
            (p for p in (REPO / name, script.parent / Path(name).name) if p.is_file()), None
        )
        assert config is not None, f"{script}: --config {name} is not a file"
        commands.append((config, [w for w in words[at + 2 :] if _OVERRIDE.match(w)]))
    return commands


def test_there_are_gpu_recipes_to_check():
    assert REPO / "recipes/search_r1/gpu_config.yaml" in GPU_CONFIGS
    assert REPO / "recipes/search_r1/run_gpu.sh" in GPU_SCRIPTS


@pytest.mark.parametrize("config", GPU_CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_gpu_config_is_valid(config):
    cfg = load_config(config, SCRIPT_PATHS)
    assert cfg.trainer.device != "cpu"
    tool_config = OmegaConf.load(config).get("actor_rollout_ref", {}).get("rollout", {})
    tool_config = tool_config.get("multi_turn", {}).get("tool_config_path")
    if tool_config is not None:
        assert (REPO / tool_config).is_file(), f"{config}: tool config {tool_config} is missing"
        assert load_tools(REPO / tool_config)


@pytest.mark.parametrize("script", GPU_SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_gpu_script_overrides_are_valid(script):
    commands = train_commands(script)
    assert commands, f"{script}: no command line with --config"
    for config, overrides in commands:
        assert overrides, f"{script}: no key.sub=value arguments after --config"
        load_config(config, overrides)


def test_search_r1_script_passes_its_paths():
    ((config, overrides),) = train_commands(REPO / "recipes/search_r1/run_gpu.sh")
    assert config == REPO / "recipes/search_r1/gpu_config.yaml"
    keys = {o.split("=", 1)[0] for o in overrides}
    assert keys == {
        "actor_rollout_ref.model.path",
        "data.train_files",
        "data.val_files",
        "actor_rollout_ref.rollout.multi_turn.tool_config_path",
        "trainer.experiment_name",
        "trainer.default_local_dir",
    }


def test_train_commands_reads_variables_defaults_and_continuations(tmp_path):
    (tmp_path / "gpu.yaml").write_text("trainer:\n  n_gpus_per_node: 8\n")
    script = tmp_path / "run_gpu.sh"
    script.write_text(
        "#!/usr/bin/env bash\n"
        "# agentrl train --config nothing.yaml trainer.seed=1  (a comment)\n"
        'STEPS=${STEPS:-20}\n'
        'DATA_DIR=$(cd "$1" && pwd)\n'
        'NAME="run-$STEPS"\n'
        'agentrl train --config "$(dirname "$0")/gpu.yaml" \\\n'
        '  trainer.total_training_steps="$STEPS" \\\n'
        '  data.train_files="$DATA_DIR/train.parquet" trainer.experiment_name=$NAME \\\n'
        '  +trainer.seed=${SEED:-7} "$@"  # the rest\n'
    )
    ((config, overrides),) = train_commands(script)
    assert config == tmp_path / "gpu.yaml"
    assert overrides == [
        "trainer.total_training_steps=20",
        "data.train_files=/placeholder/DATA_DIR/train.parquet",
        "trainer.experiment_name=run-20",
        "+trainer.seed=7",
    ]
    load_config(config, overrides)
