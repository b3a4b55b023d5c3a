"""agentrl/trainer/preflight.py: each bad input of `agentrl train` is one message, exit 2,
no traceback (unless --debug), found before the tokenizer, a model or a worker loads."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from agentrl.cli import main as agentrl_main
from agentrl.trainer import ppo_trainer, worker_setup
from agentrl.trainer.preflight import run_input_problems
from agentrl.utils.command import DEBUG_ENV


@pytest.fixture
def nothing_heavy(monkeypatch):
    """Fail the test if the run gets as far as the tokenizer, a model or the workers."""
    def loaded(*args, **kwargs):
        raise AssertionError("a tokenizer, model or worker was loaded before the check")

    monkeypatch.setattr(ppo_trainer, "load_tokenizer", loaded)
    monkeypatch.setattr(worker_setup, "start_workers", loaded)
    monkeypatch.setattr(worker_setup, "create_loaders", loaded)
    monkeypatch.setenv(DEBUG_ENV, "")  # off, and unset again after the test (--debug sets it)


@pytest.fixture
def train_args(tiny_model_dir, trainer_data, tmp_path):
    """`agentrl train` arguments of a valid run (the test recipe); extra overrides win."""
    def args(*overrides: str) -> list[str]:
        return ["train",
                f"actor_rollout_ref.model.path={tiny_model_dir}",
                f"data.train_files={trainer_data['train']}",
                "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "actor_rollout_ref.rollout.multi_turn.enable=true",
                f"actor_rollout_ref.rollout.multi_turn.tool_config_path={trainer_data['tools']}",
                f"trainer.default_local_dir={tmp_path / 'ckpt'}",
                *overrides]  # fmt: skip

    return args


def _problem(capsys, argv: list[str]) -> str:
    """Run `agentrl ARGV`; it must exit 2 with exactly one problem and no traceback."""
    assert agentrl_main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    header, *problems = err.rstrip("\n").split("\n  - ")
    assert header == "invalid configuration:" and len(problems) == 1, err
    return problems[0]


def _rewrite(source: Path, out: Path, change) -> Path:
    table = pq.read_table(source)
    pq.write_table(change(table), out)
    return out


def test_a_valid_run_has_no_problems(make_config):
    assert run_input_problems(make_config()) == []
    assert run_input_problems(make_config("trainer.device=cpu")) == []


def test_missing_data_file(nothing_heavy, train_args, capsys, tmp_path):
    nope = tmp_path / "nope.parquet"
    assert _problem(capsys, train_args(f"data.train_files={nope}")) == (
        f"data.train_files: {nope} does not exist")
    assert _problem(capsys, train_args(f"data.val_files=[{nope}]")) == (
        f"data.val_files: {nope} does not exist")
    assert _problem(capsys, train_args(f"data.train_files={tmp_path}")) == (
        f"data.train_files: {tmp_path} is not a file (a parquet file is needed)")
    text = tmp_path / "rows.parquet"
    text.write_text("not parquet")
    assert _problem(capsys, train_args(f"data.train_files={text}")).startswith(
        f"data.train_files: {text} is not a parquet file (")


def test_data_without_reward_model_fails_at_load(nothing_heavy, train_args, trainer_data,
                                                 capsys, tmp_path):  # fmt: skip
    bare = _rewrite(trainer_data["train"], tmp_path / "bare.parquet",
                    lambda t: t.drop(["reward_model"]))
    assert _problem(capsys, train_args(f"data.train_files={bare}")) == (
        f"data.train_files: {bare} has no column 'reward_model' (the reward reads "
        "reward_model.ground_truth); its columns: ability, data_source, extra_info, prompt")
    # a reward_model without ground_truth
    no_truth = _rewrite(trainer_data["train"], tmp_path / "no_truth.parquet", lambda t: t.set_column(
        t.schema.get_field_index("reward_model"), "reward_model",
        pa.array([{"style": "rule"}] * len(t))))
    assert _problem(capsys, train_args(f"data.train_files={no_truth}")) == (
        f"data.train_files: {no_truth} row 0: reward_model must be a mapping with "
        "'ground_truth' (the reward reads it), got {'style': 'rule'}")


def test_columns_the_config_names(nothing_heavy, train_args, trainer_data, capsys):
    assert _problem(capsys, train_args("data.prompt_key=question")).startswith(
        f"data.train_files: {trainer_data['train']} has no column 'question' (data.prompt_key)")
    assert _problem(capsys, train_args("data.reward_fn_key=source")).startswith(
        f"data.train_files: {trainer_data['train']} has no column 'source' (data.reward_fn_key")


def test_a_learned_reward_model_needs_no_reward_columns(trainer_data, make_config, tmp_path):
    bare = _rewrite(trainer_data["train"], tmp_path / "bare.parquet",
                    lambda t: t.drop(["reward_model", "data_source"]))
    cfg = make_config(f"data.train_files={bare}", "reward_model.enable=true",
                      f"reward_model.model.path={tmp_path}")
    assert run_input_problems(cfg) == []
    assert len(run_input_problems(make_config(f"data.train_files={bare}"))) == 1


def test_a_data_source_without_a_scorer(nothing_heavy, train_args, trainer_data, capsys,
                                        tmp_path, make_config):  # fmt: skip
    guess = _rewrite(trainer_data["train"], tmp_path / "guess.parquet", lambda t: t.set_column(
        t.schema.get_field_index("data_source"), "data_source",
        pa.array(["guess_number"] * len(t))))
    assert _problem(capsys, train_args(f"data.train_files={guess}")) == (
        f"data.train_files: {guess}: no built-in scorer for data_source 'guess_number'; set "
        "custom_reward_function.path (a compute_score of your own) or register one with "
        "agentrl.reward.score.register_data_source (docs/rewards.md)")
    # a compute_score of one's own (the test recipe's) scores any data source
    assert run_input_problems(make_config(f"data.train_files={guess}")) == []


def test_tool_class_with_a_missing_module(nothing_heavy, train_args, trainer_data, capsys,
                                          tmp_path):  # fmt: skip
    tools = yaml.safe_load(Path(trainer_data["tools"]).read_text())
    tools["tools"][0]["class_name"] = "tools.calculatr.CalculatorTool"
    bad = tmp_path / "tools.yaml"
    bad.write_text(yaml.safe_dump(tools, sort_keys=False))
    key = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
    assert _problem(capsys, train_args(f"{key}={bad}")) == (
        f"{key}: {bad}, line 2: tool config entry 0 (class_name "
        "'tools.calculatr.CalculatorTool'): cannot import 'tools.calculatr.CalculatorTool': "
        "no module named 'tools.calculatr'")


def test_interaction_class_that_does_not_import(nothing_heavy, train_args, capsys, tmp_path):
    bad = tmp_path / "interactions.yaml"
    bad.write_text("interaction:\n  - name: math\n    class_name: envs.interactions.nope.X\n")
    key = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"
    assert _problem(capsys, train_args(f"{key}={bad}")) == (
        f"{key}: {bad}, line 3: interaction config entry 0 (class_name "
        "'envs.interactions.nope.X'): cannot import 'envs.interactions.nope.X': no module "
        "named 'envs.interactions.nope'")


def test_custom_reward_function_that_does_not_load(nothing_heavy, train_args, capsys, tmp_path):
    problem = _problem(capsys, train_args(f"custom_reward_function.path={tmp_path / 'r.py'}"))
    assert problem.startswith("custom_reward_function: cannot load") and "file not found" in problem


def test_cuda_without_cuda(nothing_heavy, train_args, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _problem(capsys, train_args("trainer.device=cuda")).startswith(
        "trainer.device is cuda but torch finds no CUDA device on this machine (torch ")
    # a Ray cluster's GPU nodes may join later (docs/scale.md): not checked here
    assert _problem(capsys, train_args("trainer.device=cuda", "ray_init.address=auto",
                                       "data.train_files=nope.parquet")) == (
        "data.train_files: nope.parquet does not exist")


def test_debug_shows_the_traceback(nothing_heavy, train_args, capsys, monkeypatch):
    for argv in (["--debug", *train_args("data.train_files=nope.parquet")],
                 [*train_args("data.train_files=nope.parquet"), "--debug"]):
        monkeypatch.delenv(DEBUG_ENV, raising=False)
        assert agentrl_main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" in err and "ConfigError" in err
        assert err.endswith("  - data.train_files: nope.parquet does not exist\n")
    monkeypatch.setenv(DEBUG_ENV, "1")
    assert agentrl_main(train_args("data.train_files=nope.parquet")) == 2
    assert "Traceback" in capsys.readouterr().err


def test_an_agent_function_that_does_not_load(nothing_heavy, train_args, capsys, tmp_path):
    key = "actor_rollout_ref.rollout.agent_function"
    assert _problem(capsys, train_args(f"{key}=nowhere/agent.py:run")) == (
        f"{key}: cannot load 'nowhere/agent.py:run': file not found (tried nowhere/agent.py)")
    sync = tmp_path / "sync_agent.py"
    sync.write_text("def run(task, client):\n    return 0.0\n")
    assert _problem(capsys, train_args(f"{key}={sync}:run")) == (
        f"{key}: rollout.agent_function '{sync}:run' must be an async function "
        "(async def run(task, client))")


def test_a_model_path_that_is_no_model_directory(nothing_heavy, train_args, capsys, tmp_path):
    key = "actor_rollout_ref.model.path"
    assert _problem(capsys, train_args(f"{key}={tmp_path / 'gone'}")) == (
        f"{key}: {tmp_path / 'gone'} is not a directory (a Hugging Face model directory, or a "
        "hub id org/name)")
    assert _problem(capsys, train_args(f"{key}={tmp_path}")) == (
        f"{key}: {tmp_path} has no config.json (not a Hugging Face model directory)")


def test_fewer_training_rows_than_one_batch(nothing_heavy, train_args, capsys, trainer_data):
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(trainer_data["train"]).metadata.num_rows
    assert _problem(capsys, train_args(f"data.train_batch_size={rows + 2}",
                                       "actor_rollout_ref.actor.ppo_mini_batch_size=1")) == (
        f"data.train_files: {rows} rows, fewer than one batch of {rows + 2} "
        "(data.train_batch_size); add rows or lower it")


def test_a_checkpoint_place_it_cannot_write(nothing_heavy, train_args, capsys, tmp_path):
    (tmp_path / "file").write_text("")
    assert _problem(capsys, train_args(f"trainer.default_local_dir={tmp_path / 'file' / 'c'}")) == (
        f"trainer.default_local_dir {tmp_path / 'file' / 'c'} is under {tmp_path / 'file'}, "
        "which is a file, not a directory")
