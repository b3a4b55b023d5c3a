"""Running a command module: `python -m MODULE [--log-level L] ARGS` is `agentrl COMMAND`."""

from __future__ import annotations

import logging
import types

import pytest

from agentrl.utils.command import main_of, run_command_module


def _module(seen):
    module = types.ModuleType("fake_command", "Do the fake thing.\n\nLonger text.")
    module.add_arguments = lambda parser: parser.add_argument("--times", type=int, default=1)

    def run(args):
        seen.append(args.times)
        return 3

    module.run = run
    return module


def test_main_of_takes_the_log_level_then_the_commands_own_arguments(monkeypatch):
    seen, levels = [], []
    monkeypatch.setattr(logging, "basicConfig", lambda **kw: levels.append(kw["level"]))
    assert main_of(_module(seen), "fake", ["--log-level", "debug", "--times", "2"]) == 3
    assert seen == [2] and levels == ["DEBUG"]


def test_usage_names_the_agentrl_command_and_the_modules_first_docstring_line(capsys):
    with pytest.raises(SystemExit):
        run_command_module(_module([]), "fake", ["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: agentrl fake") and "Do the fake thing." in out
    with pytest.raises(SystemExit) as bad:
        run_command_module(_module([]), "fake", ["--times", "x"])
    assert bad.value.code == 2
    assert "argument --times: invalid int value: 'x'" in capsys.readouterr().err
