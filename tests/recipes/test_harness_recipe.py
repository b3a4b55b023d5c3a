"""recipes/harness/run_cpu.sh: 2 GRPO steps on the shell tasks through Claude Code --bare
(tiny model, hf engine, bubblewrap), end to end; the usage and a missing CLI are named."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.agents.sandbox import find_bwrap

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "recipes/harness/run_cpu.sh"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "AGENTRL_VENV": sys.prefix, "PYTHONPATH": str(ROOT), **extra}


def test_usage_and_a_missing_cli_are_named(tmp_path):
    done = subprocess.run(["bash", SCRIPT], capture_output=True, text=True)
    assert done.returncode == 2 and "usage: bash recipes/harness/run_cpu.sh OUT_DIR" in done.stderr
    done = subprocess.run(["bash", SCRIPT, str(tmp_path / "out")], capture_output=True, text=True,
                          env=_env(AGENTRL_CLAUDE_BIN=str(tmp_path / "no-claude"),
                                   PATH="/usr/bin:/bin"))
    assert done.returncode == 1 and "the claude CLI was not found" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.harness
def test_two_grpo_steps_through_claude_code(tmp_path, tiny_model_dir):
    claude = os.environ.get("AGENTRL_CLAUDE_BIN") or shutil.which("claude")
    if shutil.which("node") is None or not claude:
        pytest.skip("node or the claude CLI is absent (scripts/setup_agent_clis.sh)")
    if find_bwrap() is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    out = tmp_path / "run"
    done = subprocess.run(["bash", SCRIPT, str(out)], capture_output=True, text=True,
                          env=_env(MODEL=str(tiny_model_dir), AGENTRL_CLAUDE_BIN=claude),
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in steps if "rollout/requests" in m]
    assert [m["step"] for m in train] == [1, 2]
    for metrics in train:  # 2 prompts x 2 episodes, each a real CLI run with model calls
        assert metrics["rollout/requests"] == 4 and metrics["rollout/agent_errors"] == 0
        assert metrics["rollout/assistant_turns/mean"] >= 1
        assert metrics["gateway/forks"] == 0
