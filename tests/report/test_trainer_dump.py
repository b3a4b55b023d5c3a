"""The trainer's rollout dumps carry what the viewer needs, and `agentrl report` shows them.

The real trainer (in-process FSDP worker, multi-turn engine, the real calculator tool,
reward, GRPO update) runs one step on the tiny model; only the generation backend is a
script, so that every trajectory calls the calculator (a random tiny model rarely does):
turn 1 writes a calculator call, turn 2 an answer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import agentrl.smoke
from agentrl.cli import main
from agentrl.config import load_config
from agentrl.rollout.backends import GenerationOutput
from agentrl.tasks.arithmetic import write_arithmetic_dataset
from agentrl.trainer import run_train
from tools.calculator import DEFAULT_SCHEMA as CALCULATOR_SCHEMA

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "17*23"}}\n</tool_call>'


class CalculatorScript:
    """A GenerationBackend that calls the calculator, then answers with its result."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    async def generate(self, input_ids, sampling_params, request_id):
        text = self.tokenizer.decode(input_ids, skip_special_tokens=False)
        first_turn = text.count("<|im_start|>assistant") == 1
        out = (CALL if first_turn else "<answer>391</answer>") + "<|im_end|>"
        ids = self.tokenizer.encode(out, add_special_tokens=False)[
            : sampling_params["max_new_tokens"]
        ]
        return GenerationOutput(ids, out, "stop", [-0.5] * len(ids))

    async def abort(self, request_id) -> None:
        pass

    async def update_weights(self, weights) -> None:
        pass

    async def release_memory(self) -> None:
        pass

    async def resume_memory(self) -> None:
        pass


@pytest.fixture
def scripted_run(tiny_model_dir, tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(
        "agentrl.rollout.backends.factory.create_backend",
        lambda config, model_path, tokenizer, model=None, seed=None: CalculatorScript(tokenizer),
    )
    train, _ = write_arithmetic_dataset(tmp_path / "data", n_train=8, n_test=2, seed=0)
    tools = tmp_path / "calculator_tool.yaml"
    tools.write_text(yaml.safe_dump({"tools": [{
        "class_name": "tools.calculator.CalculatorTool", "config": {"type": "native"},
        "tool_schema": CALCULATOR_SCHEMA}]}))  # fmt: skip
    run_dir = tmp_path / "run"
    cfg = load_config(overrides=[
        f"actor_rollout_ref.model.path={tiny_model_dir}", f"data.train_files={train}",
        "data.train_batch_size=2", "data.max_prompt_length=768",
        "data.max_response_length=96", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "algorithm.adv_estimator=grpo",
        f"custom_reward_function.path={Path(agentrl.smoke.__file__)}",
        "custom_reward_function.name=smoke_compute_score",
        f"trainer.default_local_dir={run_dir}", "trainer.logger=[file]",
        "trainer.total_training_steps=1", "trainer.val_before_train=false",
        f"trainer.rollout_data_dir={tmp_path / 'dumps'}",
    ])  # fmt: skip
    run_train(cfg)
    return run_dir


def test_dump_rows_carry_tokens_masks_and_messages_and_the_report_shows_them(
    scripted_run, tmp_path, tiny_tokenizer
):
    saved = yaml.safe_load((scripted_run / "config.yaml").read_text())
    assert saved["trainer"]["rollout_data_dir"] == str((tmp_path / "dumps").resolve())
    rows = [json.loads(line) for line in (tmp_path / "dumps" / "1.jsonl").read_text().splitlines()]
    assert [r["uid"] for r in rows] == ["1-0", "1-0", "1-1", "1-1"]
    for row in rows:
        ids, mask, tokens = row["response_ids"], row["loss_mask"], row["response_tokens"]
        assert len(ids) == len(mask) == len(tokens) > 0
        assert set(mask) == {0, 1}  # the model's turns train, the tool response does not
        assert row["prompt_ids"] and tiny_tokenizer.pad_token_id not in ids[-1:]
        assert "".join(tokens) == tiny_tokenizer.decode(ids)  # one string per id
        trained = tiny_tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
        assert "17*23" in trained and "<answer>391</answer>" in trained
        untrained = tiny_tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
        assert "<tool_response>\n391\n</tool_response>" in untrained  # computed by the tool
        roles = [m["role"] for m in row["messages"]]
        assert roles[-3:] == ["assistant", "tool", "assistant"]
        call = row["messages"][-3]["tool_calls"][0]["function"]
        assert call == {"name": "calculator", "arguments": {"expression": "17*23"}}
        assert row["tool_calls"] == {"calculator": 1} and row["num_turns"] == 4
        assert row["acc"] == float(row["score"] >= 1.0) and row["request_state"] == "completed"
        # per token, aligned with the response: the engine's log-probs (the script reports
        # -0.5 per model token) and the versions (-1 where no model wrote the token)
        assert row["rollout_log_probs"] == [-0.5 if m else 0.0 for m in mask]
        assert len(row["rollout_versions"]) == len(ids)
        assert all(v == -1 for v, m in zip(row["rollout_versions"], mask, strict=True) if not m)
        assert "segment" not in row and "episode_id" not in row  # agent mode's columns only

    # the scripted engine reports -0.5 per token: each row's largest gap over its trained
    # tokens, and the step's largest over all rows is the metric's max
    metrics = [json.loads(line) for line in (scripted_run / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if m.get("step") == 1 and "training/rollout_log_probs_diff_max" in m)
    assert all(row["logprob_gap_max"] > 0 for row in rows)
    assert max(row["logprob_gap_max"] for row in rows) == pytest.approx(
        step["training/rollout_log_probs_diff_max"], abs=1e-5)
    assert (0 < step["training/rollout_log_probs_diff_p50"]
            <= step["training/rollout_log_probs_diff_p99"] <= step["training/rollout_log_probs_diff_max"])

    assert main(["report", str(scripted_run)]) == 0
    page = (scripted_run / "report.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.S).group(1))
    records = data["sources"]["rollouts"]["records"]
    assert [r["id"] for r in records] == [r["uid"] for r in rows]
    assert [r["mask"] for r in records] == [r["loss_mask"] for r in rows]
    assert all(r["tool_calls"] == 1 for r in records)
    assert 'id="plot-reward"' in page and 'id="plot-tool_calls"' in page
    assert 'id="plot-logprob_gap"' in page and '<option value="gap">' in page
