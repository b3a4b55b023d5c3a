"""The CPU recipe scripts: usage errors, and the exact `agentrl quickstart` command they
run (a stand-in `agentrl` records its arguments; the runs themselves are tested in
tests/quickstart)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {"search": "recipes/search_r1/run_cpu.sh", "retool": "recipes/retool/run_cpu.sh"}


def _recorded_args(script: str, argv: list[str], tmp_path) -> list[str]:
    """Run a recipe script with a stand-in `agentrl` that records its arguments."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "agentrl"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\n')
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "AGENTRL_VENV": str(venv)}
    subprocess.run(["bash", ROOT / script, *argv], cwd=tmp_path, env=env, check=True)
    return (tmp_path / "args").read_text().splitlines()


@pytest.mark.parametrize("task", sorted(SCRIPTS))
def test_script_runs_its_quickstart_task_with_the_given_flags(task, tmp_path):
    args = _recorded_args(SCRIPTS[task], ["out dir", "--seed", "2"], tmp_path)
    assert args == ["quickstart", "--task", task, "--out-dir", "out dir", "--seed", "2"]


@pytest.mark.parametrize("task", sorted(SCRIPTS))
@pytest.mark.parametrize("argv", [[], ["--seed", "1"]])
def test_script_without_out_dir_prints_its_usage(task, argv):
    done = subprocess.run(["bash", ROOT / SCRIPTS[task], *argv], capture_output=True, text=True)
    assert done.returncode == 2
    assert f"usage: bash {SCRIPTS[task]} OUT_DIR" in done.stderr


def test_dapo_script_runs_the_calculator_task_with_dapo_overrides_that_load(tmp_path):
    from agentrl.config import load_config

    args = _recorded_args("recipes/dapo/run_cpu.sh", ["out", "--seed", "2"], tmp_path)
    assert args[:7] == ["quickstart", "--task", "calculator", "--out-dir", "out", "--seed", "2"]
    cfg = load_config(ROOT / "recipes/quickstart/config.yaml", args[7:])
    assert cfg.algorithm.filter_groups.enable and cfg.reward_model.reward_manager == "dapo"
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.28
