"""Every command refuses bad input the same way: exit status 2, one line (or one short
paragraph) on stderr, no traceback, the foreign libraries' own output included (captured
at the file descriptors); and `agentrl --help` describes the commands as they are.

The command-specific refusals, and that they come before any work starts, are tested
beside each command (tests/quickstart/test_checks.py, tests/test_smoke.py,
tests/gateway/test_cli.py, tests/trainer/test_preflight.py, tests/trainer/test_export.py,
tests/environments/test_cli.py and test_verifiers.py: a foreign library's load,
tests/trajectories/test_cli.py)."""

from __future__ import annotations

import pytest

from agentrl.cli import COMMANDS, main
from agentrl.environments.spec import SPEC_FORMS
from agentrl.utils.command import DEBUG_ENV

MAX_LINES = 4  # a short paragraph: a ConfigError's heading and its problems, usage + error


def _bad_inputs(tmp_path):
    """(argv, what stderr must say) per command."""
    (tmp_path / "file").write_text("")
    out = str(tmp_path / "out")
    return [
        (["env", "prepare", "gym:CartPole-v1", "--out", out], "unknown environment spec"),
        (["train", "nosuch.key=1"], "unknown config key nosuch"),
        (["train", "trainer.mode=bogus"], "trainer.mode is 'bogus'"),
        (["smoke", "--out-dir", out, "trainer.mode=bogus"], "trainer.mode is 'bogus'"),
        (["smoke", "--out-dir", out, "--steps", "0"], "--steps must be >= 1"),
        (["quickstart", "--out-dir", out, "--seed", "1", "trainer.mode=bogus"],
         "trainer.mode is 'bogus'"),
        (["quickstart", "--out-dir", str(tmp_path / "file")], "is a file"),
        (["export", str(tmp_path / "nope"), "--out", out], "does not exist"),
        (["trajectories", "export", str(tmp_path / "nope"), "--out", out], "does not exist"),
        (["trajectories", "validate", str(tmp_path / "file")], "holds no trajectory"),
        (["gateway", "--model", str(tmp_path)], "is not a Hugging Face model directory"),
    ]  # fmt: skip


def test_every_command_refuses_in_one_short_message_with_exit_2(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv(DEBUG_ENV, "")  # a leaked --debug would print tracebacks
    for argv, says in _bad_inputs(tmp_path):
        code = main(argv)
        err = capfd.readouterr().err
        assert code == 2, (argv, err)
        assert says in err, (argv, err)
        assert "Traceback" not in err and 1 <= err.count("\n") <= MAX_LINES, (argv, err)
        assert not (tmp_path / "out").exists(), argv  # refused before any work


def test_a_usage_error_is_exit_2_with_the_usage_and_one_line(capfd):
    """argparse's own refusals (doctor takes no argument; it reports, never refuses)."""
    for argv in (["doctor", "--bogus"], ["nosuch-command"], ["smoke", "--steps", "x"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 2
        err = capfd.readouterr().err
        assert "Traceback" not in err and err.count("\n") <= MAX_LINES + 2, err
        assert err.splitlines()[-1].startswith("agentrl"), err


def test_help_describes_every_environment_kind_env_prepare_accepts(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split()).lower()
    for kind in SPEC_FORMS:
        assert kind.replace("_", "-") in text, kind
    assert set(COMMANDS) <= set(text.replace(",", " ").split())
