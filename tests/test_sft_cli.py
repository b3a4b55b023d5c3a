"""`agentrl sft`: settings from a YAML file and flags, errors, and one real run."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from agentrl.sft_cli import add_arguments, run, sft_settings


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_flags_override_the_config_file(tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text(
        yaml.safe_dump(
            {"model_path": "m", "data": "d.jsonl", "output_dir": "o", "epochs": 5, "lr": 0.01}
        )
    )
    assert sft_settings(parse("--config", str(config), "--lr", "0.5", "--seed", "3")) == {
        "model_path": "m",
        "data": "d.jsonl",
        "output_dir": "o",
        "epochs": 5,
        "lr": 0.5,
        "seed": 3,
    }


def test_errors_name_the_problem(tmp_path, capsys):
    config = tmp_path / "sft.yaml"
    config.write_text(yaml.safe_dump({"model_path": "m", "epoch": 2}))
    with pytest.raises(ValueError, match=r"unknown keys \['epoch'\]"):
        sft_settings(parse("--config", str(config)))
    assert run(parse("--model", "m")) == 2
    assert "agentrl sft needs data or trajectories, output_dir" in capsys.readouterr().err


def test_a_trajectory_file_that_does_not_match_is_refused_before_the_model_loads(
    tmp_path, capsys
):
    bad = tmp_path / "sessions.jsonl"
    bad.write_text(json.dumps({"format_version": 1, "session_id": "s", "reward": None,
                               "metadata": {}, "segments": []}) + "\n")
    argv = ("--model", str(tmp_path / "no-model"), "--out-dir", str(tmp_path / "out"))
    assert run(parse(*argv, "--trajectories", str(bad))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sessions.jsonl line 1 does not match the trajectory " \
        "format: segments: [] should be non-empty" in err
    assert run(parse(*argv, "--trajectories", str(tmp_path / "nope.jsonl"))) == 2
    assert "nope.jsonl does not exist" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_run_writes_model_and_metrics(tmp_path, tiny_model_dir):
    data = tmp_path / "sft.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": f"What is {k} + {k}?"},
                        {"role": "assistant", "content": f"<answer>{2 * k}</answer>"},
                    ]
                }
            )
            + "\n"
            for k in range(4)
        )
    )
    out = tmp_path / "out"
    code = run(
        parse(
            "--model",
            str(tiny_model_dir),
            "--data",
            str(data),
            "--out-dir",
            str(out),
            "--epochs",
            "2",
            "--batch-size",
            "2",
            "--lr",
            "3e-3",
        )
    )
    assert code == 0
    metrics = json.loads((out / "sft_metrics.json").read_text())
    assert metrics["steps"] == 4 and metrics["examples"] == 4
    assert metrics["loss_after"] < metrics["loss_before"]
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()


def test_a_segment_over_max_length_is_refused_in_one_line(tmp_path, tiny_model_dir, capsys):
    from agentrl.trajectories import write_trajectories

    segment = {"id": 0, "parent": None, "branch_message": 0, "branch_token": 0,
               "side_call": False, "messages": None, "prompt_length": 2,
               "token_ids": list(range(5, 25)), "loss_mask": [0, 0] + [1] * 18,
               "log_probs": None, "policy_versions": None}
    path = tmp_path / "sessions.jsonl"
    write_trajectories(path, [{"format_version": 1, "session_id": "s0", "reward": 1.0,
                               "segments": [segment], "metadata": {}}])
    out = tmp_path / "out"
    assert run(parse("--model", str(tiny_model_dir), "--trajectories", str(path),
                     "--out-dir", str(out), "--max-length", "8")) == 2
    err = capsys.readouterr().err
    assert err == ("agentrl sft: trajectory segment s0#0 has 20 tokens, over max_length=8 "
                   "(raise it, or set truncation to right/drop)\n")
    assert not out.exists()
