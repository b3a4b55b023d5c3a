"""A verl user's multi-turn GSM8K setup, unmodified but for the entry point: verl's config
YAML (Hydra defaults + searchpath), its run script's overrides, a tool YAML naming verl's
Gsm8kTool, a reward file and a curriculum sampler importing `verl.*`, and rows shaped like
verl's gsm8k_multiturn_w_tool preprocess output. One CPU step of
`python -m agentrl.trainer.main_ppo` on the tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from tests.config.test_compose import VERL_GSM8K_SCRIPT, VERL_YAML

pytestmark = pytest.mark.slow

TOOL_YAML = textwrap.dedent("""
    tools:
      - class_name: "verl.tools.gsm8k_tool.Gsm8kTool"
        config:
          type: native
        tool_schema:
          type: "function"
          function:
            name: "calc_gsm8k_reward"
            description: "A tool for calculating the reward of gsm8k. (1.0 if parsed answer is correct, 0.0 if parsed answer is incorrect or not correctly parsed)"
            parameters:
              type: "object"
              properties:
                answer:
                  type: "string"
                  description: "The model's answer to the GSM8K math problem, must be a digits"
              required: ["answer"]
""")  # noqa: E501

REWARD_FILE = textwrap.dedent("""
    import json

    from verl.utils.reward_score import gsm8k


    def compute_score(data_source, solution_str, ground_truth, extra_info=None, record_path=None):
        score = gsm8k.compute_score(solution_str, ground_truth)
        with open(record_path, "a") as f:
            f.write(json.dumps({"data_source": data_source, "ground_truth": ground_truth,
                                "extra_info": extra_info, "score": score}) + "\\n")
        return score
""")

SAMPLER_FILE = textwrap.dedent("""
    import os

    from verl.experimental.dataset.sampler import AbstractCurriculumSampler


    class InOrderCurriculum(AbstractCurriculumSampler):
        def __init__(self, data_source, data_config):
            self.n = len(data_source)

        def __iter__(self):
            return iter(range(self.n))

        def __len__(self):
            return self.n

        def update(self, batch):
            with open(os.environ["CURRICULUM_LOG"], "a") as f:
                f.write(f"{len(batch)}\\n")
""")

SYSTEM = ("You are a math expert. You are given a question and you need to solve it step by "
          "step. Reasoning step by step before any tool call. You should use the "
          "`calc_gsm8k_reward` tool after step by step solving the question, before generate "
          "final answer at least once and refine your answer if necessary. Put your final "
          "answer in the format of `#### <answer>`.")


def verl_gsm8k_rows(split: str, n: int) -> list[dict]:
    """Rows as verl's examples/data_preprocess/gsm8k_multiturn_w_tool.py writes them."""
    rows = []
    for i in range(n):
        question = f"Tom has {i + 2} boxes of 3 pens. How many pens does he have?"
        answer = str(3 * (i + 2))
        rows.append({
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "system", "content": SYSTEM},
                       {"role": "user", "content": question + " Let's think step by step and "
                        "output the final answer after `####`."}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {
                "split": split, "index": i, "answer": f"3 * {i + 2} = {answer}\n#### {answer}",
                "question": question, "need_tools_kwargs": True,
                "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": answer}}},
                "interaction_kwargs": {"query": question, "ground_truth": answer},
            },
        })  # fmt: skip
    return rows


def test_verls_gsm8k_multiturn_example_runs_one_step(tmp_path, tiny_model_dir):
    config_dir = tmp_path / "config"
    (config_dir / "tool_config").mkdir(parents=True)
    (config_dir / "gsm8k_multiturn_grpo.yaml").write_text(VERL_YAML)
    tool_config = config_dir / "tool_config" / "gsm8k_tool_config.yaml"
    tool_config.write_text(TOOL_YAML)
    (tmp_path / "reward.py").write_text(REWARD_FILE)
    (tmp_path / "curriculum.py").write_text(SAMPLER_FILE)
    data = tmp_path / "gsm8k"
    data.mkdir()
    pd.DataFrame(verl_gsm8k_rows("train", 4)).to_parquet(data / "train.parquet")
    pd.DataFrame(verl_gsm8k_rows("test", 2)).to_parquet(data / "test.parquet")
    record, out = tmp_path / "scores.jsonl", tmp_path / "run"
    # verl's run script, then what a user appends ($@) to fit a CPU and a tiny model
    argv = [
        sys.executable, "-m", "agentrl.trainer.main_ppo",
        f"--config-path={config_dir}", "--config-name=gsm8k_multiturn_grpo",
        *VERL_GSM8K_SCRIPT,
        f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}",
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        "data.train_batch_size=2", "data.max_response_length=24",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.name=hf",
        "trainer.n_gpus_per_node=1", "trainer.logger=[console,file]",
        "trainer.total_training_steps=1", "trainer.val_before_train=False",
        f"trainer.default_local_dir={out}",
        f"custom_reward_function.path={tmp_path / 'reward.py'}",
        f"+custom_reward_function.reward_kwargs.record_path={record}",
        f"data.sampler.class_path=file://{tmp_path / 'curriculum.py'}",
        "data.sampler.class_name=InOrderCurriculum", "data.dataloader_num_workers=0",
    ]  # fmt: skip
    env = {"CURRICULUM_LOG": str(tmp_path / "curriculum.log"), "HF_HUB_OFFLINE": "1",
           "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "no effect in agentrl: global_profiler" in done.stderr  # one warning, named
    assert "verl.tools.gsm8k_tool -> tools.gsm8k" in done.stderr

    (row,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()
              if json.loads(x).get("step") == 1 and "critic/score/mean" in json.loads(x)]
    assert 0.0 <= row["critic/score/min"] <= row["critic/score/max"] <= 1.0  # verl's range
    scores = [json.loads(x) for x in record.read_text().splitlines()]
    train_scores = [s for s in scores if s["extra_info"]["split"] == "train"]
    assert len(train_scores) == 4  # 2 prompts x n=2, in the sampler's order: rows 0 and 1
    assert {s["ground_truth"] for s in train_scores} == {"6", "9"}
    for s in train_scores:
        # verl's extra_info: the row's fields plus num_turns and the tools' rewards
        assert set(s["extra_info"]["rollout_reward_scores"]) >= {"calc_gsm8k_reward"}
        assert s["extra_info"]["num_turns"] >= 2 and s["extra_info"]["need_tools_kwargs"]
    assert (tmp_path / "curriculum.log").read_text().split() == ["4"]  # update() once
