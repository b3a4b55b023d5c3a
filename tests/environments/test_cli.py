"""`agentrl env prepare`: files and the train overrides printed; bad input exits 2 with
the reason (unknown spec, missing package naming the extra)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentrl.cli import main


def test_prepare_prints_the_overrides_that_use_the_files(tmp_path, capsys):
    pytest.importorskip("textarena")
    out = tmp_path / "guess"
    assert main(["env", "prepare", "textarena:GuessTheNumber-v0", "--out", str(out),
                 "--size", "2", "--test-size", "2", "--seed", "7"]) == 0
    printed = capsys.readouterr().out
    assert f"data.train_files={out / 'train.parquet'}" in printed
    assert f"interaction_config_path={out / 'interaction.yaml'}" in printed
    assert (out / "test.parquet").is_file()


def test_an_unknown_spec_exits_2_and_lists_the_forms(tmp_path, capsys):
    assert main(["env", "prepare", "gym:CartPole-v1", "--out", str(tmp_path)]) == 2
    assert "reasoning_gym:TASK" in capsys.readouterr().err


def test_a_missing_package_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import fails
    assert main(["env", "prepare", "reasoning_gym:chain_sum", "--out", str(tmp_path)]) == 2
    assert "pip install 'agentrl[envs]'" in capsys.readouterr().err


def test_an_openenv_server_that_is_not_there_exits_2_with_the_reason(tmp_path, capsys):
    pytest.importorskip("openenv.core")
    out = tmp_path / "oe"
    assert main(["env", "prepare", "openenv:http://127.0.0.1:9", "--out", str(out)]) == 2
    assert "openenv:http://127.0.0.1:9: ConnectError" in capsys.readouterr().err
    assert not out.exists()


def test_a_verifiers_tool_environment_prints_the_tool_and_interaction_configs(tmp_path, capsys,
                                                                             monkeypatch):
    pytest.importorskip("verifiers")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "fixtures"))  # vf_adder.py
    out = tmp_path / "adder"
    assert main(["env", "prepare", "verifiers:vf-adder", "--out", str(out), "--size", "3",
                 "--test-size", "2"]) == 0
    printed = capsys.readouterr().out
    assert f"tool_config_path={out / 'tools.yaml'}" in printed
    assert f"interaction_config_path={out / 'interaction.yaml'}" in printed
    assert printed.count("multi_turn.enable=true") == 1
