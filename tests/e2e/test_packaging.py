"""The package works installed from a wheel, not only from a checkout: the built wheel,
installed into a fresh venv, runs `agentrl quickstart` (which reads its recipe, tool file
and report assets as package data) from a directory outside the checkout.

The wheel is built by the setuptools this environment has (the lock pins it; pip's build
isolation would fetch setuptools and wheel from PyPI on every run) and installed into the
fresh venv by this environment's pip (`pip --python`): the venv gets no pip of its own,
whose ensurepip step was most of the test's time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs_a_command(tmp_path):
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(dist), str(ROOT)],
        cwd=tmp_path,
        timeout=300,
    )  # fmt: skip
    (wheel,) = dist.glob("agentrl-*.whl")
    with zipfile.ZipFile(wheel) as built:  # the trajectory format's schema is package data
        assert "agentrl/trajectories/schema/trajectory.schema.json" in built.namelist()
    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=False)
    python = fresh / "bin" / "python"
    # The dependencies come from this environment's site-packages (a path entry, so its
    # editable-install hook for the checkout is not loaded); agentrl only from the wheel.
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
             cwd=tmp_path, timeout=60).stdout.strip()
    )  # fmt: skip
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
          str(wheel)], tmp_path, 300)  # fmt: skip
    where = _run(
        [str(python), "-c", "import agentrl, recipes.quickstart as r; print(agentrl.__file__, r.__file__)"],
        cwd=tmp_path,
        timeout=60,
    ).stdout.split()
    assert all(path.startswith(str(fresh)) for path in where), where
    title = _run([str(python), "-c", "from agentrl.trajectories import trajectory_schema; "
                  "print(trajectory_schema()['title'])"], cwd=tmp_path, timeout=60).stdout
    assert "agentrl trajectory" in title
    out = tmp_path / "qs"
    _run(
        [
            str(fresh / "bin" / "agentrl"), "quickstart", "--out-dir", str(out), "--steps", "0",
            "--sft-steps", "2", "--sft-check", "0", "--sft-examples", "8", "--n-train", "8",
            "--n-test", "4",
        ],
        cwd=tmp_path,
        timeout=300,
    )  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert report["eval_sft"]["trajectories"] == 4
    assert "<img" in (out / "report.html").read_text()
    # verl's way in works from the wheel: a defaults list naming `ppo_trainer` finds the
    # packaged defaults through Hydra's pkg:// search path
    verl_dir = tmp_path / "verl_config"
    verl_dir.mkdir()
    (verl_dir / "grpo.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n"
        "defaults:\n  - ppo_trainer\n  - _self_\ndata:\n  train_batch_size: 256\n"
    )
    printed = _run(
        [str(fresh / "bin" / "agentrl"), "config", f"--config-path={verl_dir}",
         "--config-name=grpo", "actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16"],
        cwd=tmp_path,
        timeout=120,
    ).stdout  # fmt: skip
    assert "train_batch_size: 256" in printed and "model_dtype: bf16" in printed
