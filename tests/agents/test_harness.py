"""run_episode with a stand-in CLI (a shell script, no node): options from the environment
and keywords, the check's exit -> the score, the task's scorer without a check, the
wall-clock budget, the episode folder removed; missing pieces named with their fix; in
bubblewrap, the CLI sees neither the home nor the check's files, runs Python and node, and
the check runs over a copy of the workspace with the check's files written in."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from agentrl.agents.harness import AgentOptions, Harness, find_binary
from tests.agents.conftest import run_harness_episode


def _harness(tmp_path: Path, script: str) -> Harness:
    cli = tmp_path / "fake-cli"
    cli.write_text("#!/bin/sh\n" + script)
    cli.chmod(0o755)
    return Harness(name="fake", binary_env="AGENTRL_FAKE_BIN", binary_name="fake-cli",
                   args_env="AGENTRL_FAKE_ARGS",
                   command=lambda binary, prompt, home, extra: [binary, *extra, prompt],
                   environment=lambda home: {"FAKE_URL": "http://127.0.0.1:{port}"},
                   prepare_home=lambda home: None, final_text=lambda out: out)


def test_the_check_scores_the_workspace_and_the_folder_goes(tmp_path, monkeypatch):
    harness = _harness(tmp_path, 'echo "$1" > prompt.txt; echo "$FAKE_URL" > url.txt\n')
    root = tmp_path / "episodes"
    monkeypatch.setenv("AGENTRL_FAKE_BIN", str(tmp_path / "fake-cli"))
    monkeypatch.setenv("AGENTRL_AGENT_ROOT", str(root))
    monkeypatch.setenv("AGENTRL_AGENT_SANDBOX", "none")
    options = AgentOptions.from_env(harness)
    assert (options.binary, options.sandbox) == (str(tmp_path / "fake-cli"), "none")
    task = {"raw_prompt": [{"role": "user", "content": "do it"}],
            "extra_info": {"files": {"in.txt": "x"},
                           "check": "grep -qx 'do it' prompt.txt && grep -q '127.0.0.1:[0-9]' url.txt"}}
    assert run_harness_episode(harness, task, options) == {"turns": 0, "stopped": "exit", "cli_exit": 0,
                                            "check_exit": 0, "score": 1.0, "limit": None,
                                            "limit_kills": 0}
    task["extra_info"]["check"] = "false"
    assert run_harness_episode(harness, task, options)["score"] == 0.0
    assert list(root.iterdir()) == []


def test_without_a_check_the_tasks_scorer_reads_the_final_text(tmp_path):
    harness = _harness(tmp_path, 'echo "<answer>42</answer>"\n')
    options = AgentOptions(binary=str(tmp_path / "fake-cli"), sandbox="none",
                           root=str(tmp_path / "ep"))
    task = {"raw_prompt": [{"role": "user", "content": "6*7?"}],
            "data_source": "agentrl/arithmetic", "reward_model": {"ground_truth": "42"}}
    assert run_harness_episode(harness, task, options)["score"] == 1.0
    task["reward_model"] = {"ground_truth": "41"}
    assert run_harness_episode(harness, task, options)["score"] == 0.0
    with pytest.raises(ValueError, match="neither extra_info.check nor"):
        run_harness_episode(harness, {"raw_prompt": task["raw_prompt"]}, options)


def test_the_wall_clock_budget_kills_the_cli_and_the_row_may_shorten_it(tmp_path):
    harness = _harness(tmp_path, "touch started; sleep 30\n")
    options = AgentOptions(binary=str(tmp_path / "fake-cli"), sandbox="none", timeout_s=30,
                           root=str(tmp_path / "ep"))
    task = {"raw_prompt": [{"role": "user", "content": "x"}],
            "extra_info": {"check": "test -f started", "agent": {"timeout_s": 1}}}
    result = run_harness_episode(harness, task, options)
    assert result["stopped"] == "timeout" and result["cli_exit"] is None
    assert result["score"] == 1.0


def test_options_and_missing_pieces_are_named(tmp_path, monkeypatch):
    harness = _harness(tmp_path, "")
    monkeypatch.setenv("AGENTRL_AGENT_MAX_TURNS", "3")
    monkeypatch.setenv("AGENTRL_FAKE_ARGS", "--bare --x 'a b'")
    options = AgentOptions.from_env(harness, timeout_s=9.0)
    assert (options.max_turns, options.timeout_s, options.extra_args) == (
        3, 9.0, ("--bare", "--x", "a b"))
    with pytest.raises(TypeError, match="unknown agent option"):
        AgentOptions.from_env(harness, max_turn=3)
    with pytest.raises(ValueError, match="bwrap"):
        AgentOptions.from_env(harness, sandbox="docker")
    monkeypatch.setenv("AGENTRL_AGENT_MAX_TURNS", "many")
    with pytest.raises(ValueError, match="AGENTRL_AGENT_MAX_TURNS"):
        AgentOptions.from_env(harness)
    missing = dataclasses.replace(options, binary=str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="AGENTRL_FAKE_BIN .*setup_agent_clis"):
        find_binary(harness, missing)
    monkeypatch.setenv("AGENTRL_BWRAP", str(tmp_path / "no-bwrap"))
    bwrapped = AgentOptions(binary=str(tmp_path / "fake-cli"), sandbox="bwrap",
                            root=str(tmp_path / "ep"))
    with pytest.raises(FileNotFoundError, match="AGENTRL_AGENT_SANDBOX=none"):
        run_harness_episode(harness, {"raw_prompt": [{"role": "user", "content": "x"}]}, bwrapped)


def test_in_the_cage_the_cli_sees_no_home_and_no_check_files(tmp_path, bwrap):
    fd, secret = tempfile.mkstemp(prefix=".agentrl-secret-", dir=Path.home())
    os.write(fd, b"SECRET\n")
    os.close(fd)
    node = "node -e 'console.log(2)'" if shutil.which("node") else "echo 2"
    harness = _harness(tmp_path, f"""
cat {secret} > seen.txt 2>/dev/null || echo hidden-home > seen.txt
cat test_calc.py >> seen.txt 2>/dev/null || echo no-test >> seen.txt
python3 -c 'print(6 * 7)' > tools.txt; {node} >> tools.txt
echo "print('planted')" > test_calc.py
""")
    options = AgentOptions(binary=str(tmp_path / "fake-cli"), sandbox="bwrap",
                           root=str(tmp_path / "ep"), keep=True)
    task = {"raw_prompt": [{"role": "user", "content": "x"}],
            "extra_info": {"check_files": {"test_calc.py": "print('real-test')\n"},
                           "check": 'python3 test_calc.py > ran.txt; case "$PWD" in '
                                    '*/workspace) exit 0;; esac; exit 1'}}
    try:
        result = run_harness_episode(harness, task, options)
    finally:
        os.unlink(secret)
    assert (result["cli_exit"], result["check_exit"], result["score"]) == (0, 0, 1.0)
    [episode] = (tmp_path / "ep").iterdir()
    assert (episode / "workspace" / "seen.txt").read_text().split() == ["hidden-home", "no-test"]
    assert (episode / "workspace" / "tools.txt").read_text().split() == ["42", "2"]
    assert (episode / "check" / "ran.txt").read_text() == "real-test\n"
    assert not (episode / "workspace" / "ran.txt").exists()  # the check wrote in its copy


def test_a_rows_missing_ro_bind_is_named(tmp_path, bwrap):
    harness = _harness(tmp_path, "true\n")
    options = AgentOptions(binary=str(tmp_path / "fake-cli"), sandbox="bwrap",
                           root=str(tmp_path / "ep"))
    task = {"raw_prompt": [{"role": "user", "content": "x"}],
            "extra_info": {"check": "true", "agent": {"ro_binds": ["/no/such/data"]}}}
    with pytest.raises(FileNotFoundError, match="ro_binds: '/no/such/data' does not exist"):
        run_harness_episode(harness, task, options)
    task["extra_info"]["agent"] = {"interpreters": ["no-such-interpreter"]}
    with pytest.raises(FileNotFoundError, match="interpreters: 'no-such-interpreter'"):
        run_harness_episode(harness, task, options)
