"""Running a command module: `python -m MODULE [--log-level L] ARGS` is `agentrl COMMAND`."""

from __future__ import annotations

import logging
import types

import pytest

from agentrl.utils.command import (
    DEBUG_ENV,
    debug_enabled,
    main_of,
    report_error,
    run_command_module,
)


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


def _raise(message):
    try:
        raise ValueError(message)
    except ValueError as err:
        return err


def test_a_reported_error_is_one_message_and_exit_2_its_traceback_only_with_debug(
        monkeypatch, capsys):  # fmt: skip
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    assert report_error(_raise("data.train_files: x does not exist")) == 2
    assert capsys.readouterr().err == "data.train_files: x does not exist\n"
    for off in ("0", "false", ""):
        monkeypatch.setenv(DEBUG_ENV, off)
        assert not debug_enabled()
    monkeypatch.setenv(DEBUG_ENV, "1")
    assert report_error(_raise("bad")) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and err.endswith("bad\n")


def test_debug_flag_of_every_command_sets_the_environment(monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    seen = []
    assert run_command_module(_module(seen), "fake", ["--times", "2"]) == 3
    assert not debug_enabled()
    assert run_command_module(_module(seen), "fake", ["--debug", "--times", "2"]) == 3
    assert seen == [2, 2] and debug_enabled()
    monkeypatch.delenv(DEBUG_ENV)
    assert main_of(_module(seen), "fake", ["--debug"]) == 3 and debug_enabled()
