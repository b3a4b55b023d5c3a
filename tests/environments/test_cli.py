"""`agentrl env prepare`: files and the train overrides printed; bad input exits 2 with
the reason (unknown spec, missing package naming the extra)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.utils.command import DEBUG_ENV


def test_prepare_prints_the_overrides_that_use_the_files(tmp_path, capsys):
    pytest.importorskip("textarena")
    out = tmp_path / "guess"
    args = ["env", "prepare", "textarena:GuessTheNumber-v0", "--out", str(out), "--size", "2",
            "--test-size", "2", "--seed", "7"]
    assert main(args) == 2  # its prompt is the same for every seed: refused, naming the flag
    err = capsys.readouterr().err
    assert err.startswith("agentrl env prepare: textarena:GuessTheNumber-v0: its prompt does "
                          "not change with the seed (")
    assert err.count("\n") == 1 and "pass --allow-shared-prompts" in err
    assert not out.exists()
    assert main([*args, "--allow-shared-prompts"]) == 0
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


def _prepare(*args):
    return main(["env", "prepare", *args, "--size", "2", "--test-size", "1"])


@pytest.mark.parametrize(("where", "says"), [
    ("file", "is a file, not a directory"),
    ("file/sub/dir", "is under .*file, which is a file"),
])  # fmt: skip
def test_an_out_that_is_or_is_under_a_file_exits_2(tmp_path, capsys, where, says):
    (tmp_path / "file").write_text("keep me")
    assert _prepare("reasoning_gym:chain_sum", "--out", str(tmp_path / where)) == 2
    err = capsys.readouterr().err
    assert re.search(says, err) and "Traceback" not in err and err.count("\n") == 1
    assert (tmp_path / "file").read_text() == "keep me"


def test_an_out_it_cannot_write_exits_2(capsys):
    assert _prepare("reasoning_gym:chain_sum", "--out", "/proc/agentrl-no/data") == 2
    assert "--out /proc/agentrl-no/data: cannot write in /proc" in capsys.readouterr().err


def test_a_write_that_fails_late_exits_2(tmp_path, capsys, monkeypatch):
    import agentrl.environments.prepare as prepare

    def full_disk(rows, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prepare, "write_parquet", full_disk)
    assert _prepare("reasoning_gym:chain_sum", "--out", str(tmp_path / "rg")) == 2
    assert "No space left on device" in capsys.readouterr().err


def test_a_task_that_cannot_be_configured_from_a_spec_exits_2(tmp_path, capsys):
    pytest.importorskip("reasoning_gym")
    assert _prepare("reasoning_gym:composite", "--out", str(tmp_path / "c")) == 2
    err = capsys.readouterr().err
    assert "reasoning_gym:composite cannot be made from its default config" in err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(("spec", "meant"), [("reasoning_gym:sudoku_mini", "mini_sudoku"),
                                             ("reasoning_gym:basic_arithmetc", "basic_arithmetic"),
                                             ("textarena:GuessTheNumbr-v0", "GuessTheNumber-v0")])
def test_a_name_typo_gets_a_suggestion(tmp_path, capsys, spec, meant):
    pytest.importorskip(spec.partition(":")[0])
    assert _prepare(spec, "--out", str(tmp_path / "x")) == 2
    assert re.search(f"did you mean [^?]*{meant}", capsys.readouterr().err)


@pytest.mark.parametrize(("game", "says"), [
    ("TicTacToe-v0", r"cannot be reset for one player \(AssertionError: The number of players "
                     r"has to be 2, received 1\); agentrl plays single-player games only"),
    ("QuantumTicTacToe-v0", "is not a single-player game .*TwoPlayerState"),
    ("PublicGoodsGame-v0", "is not a single-player game .*FFAMultiPlayerState"),
])  # fmt: skip
def test_a_game_for_more_than_one_player_is_refused_with_the_reason(tmp_path, capsys, game,
                                                                   says):
    pytest.importorskip("textarena")
    assert _prepare(f"textarena:{game}", "--out", str(tmp_path / "g")) == 2
    assert re.search(f"textarena:{game}.*{says}", capsys.readouterr().err)
    assert not (tmp_path / "g").exists()


def test_a_missing_nltk_corpus_is_named_not_taken_for_an_unknown_id(tmp_path, capsys,
                                                                    monkeypatch):
    textarena = pytest.importorskip("textarena")
    import nltk

    def needs_corpus(env_id, **kwargs):
        nltk.data.find("corpora/agentrl_no_such_corpus")  # nltk's own LookupError

    monkeypatch.setattr(textarena, "make", needs_corpus)
    assert _prepare("textarena:Wordle-v0", "--out", str(tmp_path / "w")) == 2
    err = capsys.readouterr().err
    assert ("textarena:Wordle-v0: it needs the nltk corpus 'agentrl_no_such_corpus', which is "
            "not installed here (python -m nltk.downloader agentrl_no_such_corpus)") in err
    assert "has no game" not in err and "ENV_REGISTRY" not in err


def test_a_server_app_that_does_not_import_is_one_line_naming_the_cause(tmp_path, capsys,
                                                                        monkeypatch):
    pytest.importorskip("openenv.core")
    monkeypatch.setenv(DEBUG_ENV, "")  # --debug keeps the whole message
    out = tmp_path / "oe"
    assert _prepare("openenv:no_such_pkg.server.app", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err  # the child's: 40 lines
    assert err.startswith("agentrl env prepare: openenv:no_such_pkg.server.app: ")
    assert err.endswith("... ModuleNotFoundError: No module named 'no_such_pkg'\n")
    assert not out.exists()


def test_one_line_keeps_the_first_line_and_the_cause_at_the_end():
    from agentrl.environments.cli import one_line

    assert one_line(ValueError("one line")) == "one line"
    assert one_line(RuntimeError("server exited:\nTraceback\n  File x\n\nKeyError: 'k'\n")) == (
        "server exited: ... KeyError: 'k'")
    assert one_line(LookupError("\n*****\n")) == "LookupError"


@pytest.mark.parametrize("tag", ["", " ", "my answer", "<answer>", "ans/wer", "1st"])
def test_an_answer_tag_that_is_not_a_tag_name_exits_2_before_anything_is_made(tmp_path, capsys,
                                                                             tag):
    """An empty tag asked for the answer inside <></>, which the scorer never read."""
    out = tmp_path / "t"
    assert _prepare("reasoning_gym:chain_sum", "--out", str(out), "--answer-tag", tag) == 2
    assert capsys.readouterr().err == (
        f"agentrl env prepare: --answer-tag {tag!r} is not a tag name: a letter or _, then "
        "letters, digits, _, - or . (the answer goes inside <TAG></TAG>)\n")
    assert not out.exists()


def test_a_game_that_ignores_its_seed_is_refused_rather_than_tested_on_training_data(tmp_path,
                                                                                   capsys):
    pytest.importorskip("textarena")
    out = tmp_path / "countdown"
    assert main(["env", "prepare", "textarena:Countdown-v0", "--out", str(out), "--size", "3",
                 "--test-size", "2"]) == 2
    assert capsys.readouterr().err == (
        "agentrl env prepare: textarena:Countdown-v0: 26 seeds gave 1 distinct item: it ignores "
        "its seed, so train and test cannot hold different items\n")
    assert not out.exists()
