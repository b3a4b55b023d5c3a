"""`agentrl generate`: a parquet dataset rolled out to jsonl, with tools, scores and summary."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from agentrl.config import ConfigError, load_config
from agentrl.generate import add_arguments, check_generate_config, generate, run
from agentrl.rollout.backends import GenerationOutput
from agentrl.tasks.arithmetic import make_arithmetic_rows, write_parquet

REPO = Path(__file__).resolve().parents[1]
CALCULATOR = REPO / "examples" / "tool_configs" / "calculator.yaml"


class OracleBackend:
    """Calls the calculator with the row's expression, then answers with its result (or a
    wrong answer for the questions in `wrong`)."""

    def __init__(self, tokenizer, rows, wrong=()):
        self.tokenizer = tokenizer
        self.expressions = {
            r["extra_info"]["question"]: r["extra_info"]["expression"] for r in rows
        }
        self.wrong = set(wrong)

    async def generate(self, input_ids, sampling_params, request_id):
        text = self.tokenizer.decode(input_ids, skip_special_tokens=False)
        question = next(q for q in self.expressions if q in text)
        responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.S)
        if not responses:
            call = {"name": "calculator", "arguments": {"expression": self.expressions[question]}}
            out = "<tool_call>\n" + json.dumps(call) + "\n</tool_call><|im_end|>"
        else:
            answer = "0" if question in self.wrong else responses[-1]
            out = f"The answer is <answer>{answer}</answer><|im_end|>"
        ids = self.tokenizer.encode(out, add_special_tokens=False)
        return GenerationOutput(ids, out, "stop", [-1.0] * len(ids))

    async def abort(self, request_id):
        return None


def config(tmp_path, model_dir, rows, *overrides):
    data = write_parquet(rows, tmp_path / "data.parquet")
    return load_config(
        overrides=[
            f"data.path={data}",
            f"data.output_path={tmp_path / 'out' / 'rollouts.jsonl'}",
            f"actor_rollout_ref.model.path={model_dir}",
            "data.max_prompt_length=1024",
            "data.max_response_length=256",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={CALCULATOR}",
            *overrides,
        ]
    )


def read_rows(cfg) -> list[dict]:
    return [json.loads(line) for line in Path(cfg.data.output_path).read_text().splitlines()]


def test_generate_with_tools_writes_rows_and_scores(
    tmp_path, tiny_model_dir, tiny_tokenizer, caplog
):
    rows = make_arithmetic_rows(3, "test", seed=0)
    cfg = config(
        tmp_path, tiny_model_dir, rows, "actor_rollout_ref.rollout.n=2", "data.val_batch_size=2"
    )
    backend = OracleBackend(tiny_tokenizer, rows, wrong=[rows[1]["extra_info"]["question"]])
    with caplog.at_level("WARNING"):
        summary = generate(cfg, backend=backend)
    assert "raw_prompt_ids" not in caplog.text  # the engine renders prompts as the dataset does

    assert summary == {
        "trajectories": 6.0,
        "num_turns/mean": 4.0,
        "tool_calls/mean": 1.0,
        "tool_errors": 0.0,
        "parse_errors": 0.0,
        "failed": 0.0,
        "truncated": 0.0,
        "score/mean": pytest.approx(4 / 6),
    }
    out = read_rows(cfg)
    assert [(r["index"], r["sample"]) for r in out] == [(i, j) for i in range(3) for j in range(2)]
    assert [r["score"] for r in out] == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    first = out[0]
    assert set(first) == {
        "index",
        "sample",
        "data_source",
        "messages",
        "input_ids",
        "loss_mask",
        "rollout_log_probs",
        "prompt_length",
        "finish_reason",
        "truncation",
        "state",
        "num_turns",
        "reward_scores",
        "metrics",
        "score",
    }
    assert len(first["input_ids"]) == len(first["loss_mask"]) == len(first["rollout_log_probs"])
    assert first["loss_mask"][: first["prompt_length"]] == [0] * first["prompt_length"]
    model_tokens = [t for t, m in zip(first["input_ids"], first["loss_mask"], strict=True) if m]
    assert all(
        p == -1.0 for p, m in zip(first["rollout_log_probs"], first["loss_mask"], strict=True) if m
    )
    assert tiny_tokenizer.decode(model_tokens).endswith("</answer><|im_end|>")
    assert [m["role"] for m in first["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert first["messages"][3]["content"] == rows[0]["reward_model"]["ground_truth"]
    assert (first["finish_reason"], first["state"], first["num_turns"]) == ("stop", "completed", 4)
    assert first["reward_scores"] == {"calculator": 0.0}
    assert first["metrics"]["tool_calls"] == {"calculator": 1}
    assert first["metrics"]["tokenization"] == "match"


def test_generate_unknown_data_source_is_not_scored(tmp_path, tiny_model_dir, tiny_tokenizer):
    rows = make_arithmetic_rows(1, "test", seed=1)
    rows[0]["data_source"] = "my/own"
    cfg = config(tmp_path, tiny_model_dir, rows)
    summary = generate(cfg, backend=OracleBackend(tiny_tokenizer, rows))
    assert "score/mean" not in summary
    assert "score" not in read_rows(cfg)[0]


def test_config_problems_are_reported(tmp_path, capsys):
    with pytest.raises(ConfigError) as err:
        check_generate_config(load_config())
    assert err.value.problems == [
        "data.path must name the parquet file(s) to roll out",
        "data.output_path must name the jsonl file to write",
        "actor_rollout_ref.model.path must name the model (or "
        "actor_rollout_ref.rollout.server_urls the servers that serve it)",
    ]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args(["data.path=x.parquet"])) == 2
    assert "data.output_path must name" in capsys.readouterr().err


def test_cli_with_the_hf_backend(tmp_path, tiny_model_dir):
    rows = make_arithmetic_rows(2, "test", seed=2)
    data = write_parquet(rows, tmp_path / "data.parquet")
    output = tmp_path / "rollouts.jsonl"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            f"data.path={data}",
            f"data.output_path={output}",
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "data.max_prompt_length=1024",
            "data.max_response_length=12",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={CALCULATOR}",
            "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=disable",
        ]
    )
    assert run(args) == 0
    out = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(out) == 4
    for row in out:
        response = len(row["input_ids"]) - row["prompt_length"]
        assert 1 <= response <= 12
        assert sum(row["loss_mask"]) >= 1 and row["score"] == 0.0
        assert row["metrics"]["assistant_turns"] >= 1
