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
    assert "agentrl sft needs data, output_dir" in capsys.readouterr().err


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
