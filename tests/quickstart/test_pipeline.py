"""The quickstart pipeline: the recipe, disjoint data pools, the imperfect teacher, the
command line, and (slow) a CI-size run of the whole command that must learn."""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import logging
import os
import re
import secrets
from pathlib import Path

import pandas as pd
import pytest

from agentrl.config import load_config
from agentrl.quickstart import (
    QuickstartSettings,
    add_arguments,
    rl_model_dir,
    run_quickstart,
    settings_for,
)
from agentrl.quickstart.__init__ import settings_from_args
from agentrl.quickstart.pipeline import reward_curve
from agentrl.tasks.arithmetic import expression_pool
from agentrl.tasks.quickstart import (
    CALCULATOR,
    CALCULATOR_DIRECT_PHRASINGS,
    SEARCH,
    check_disjoint,
    recipe_file,
)
from agentrl.tools import load_tool_schemas, load_tools

RECIPE_CONFIG = CALCULATOR.recipe_config
RECIPE_TOOLS = recipe_file("quickstart", "calculator_tool.yaml")
DIRECT_PHRASINGS = CALCULATOR_DIRECT_PHRASINGS


def test_recipe_is_valid_and_is_the_measured_one():
    cfg = load_config(RECIPE_CONFIG, ["actor_rollout_ref.model.path=m", "data.train_files=t"])
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert cfg.algorithm.adv_estimator == "grpo"
    assert rollout.multi_turn.enable and rollout.multi_turn.max_assistant_turns == 3
    assert (cfg.data.train_batch_size, rollout.n) == (16, 8)
    assert cfg.data.train_batch_size // actor.ppo_mini_batch_size == 2  # 2 optimizer steps
    assert actor.optim.lr == 3e-4 and not actor.use_kl_loss
    assert rollout.max_num_seqs >= cfg.data.train_batch_size * rollout.n  # one wave
    assert cfg.reward_model.tool_reward_weight == 0.0  # the exact answer only
    assert "hf_model" in actor.checkpoint.save_contents
    assert list(load_tools(RECIPE_TOOLS)) == ["calculator"]
    (schema,) = load_tool_schemas(RECIPE_TOOLS)
    assert schema["function"]["parameters"]["required"] == ["expression"]


def test_pools_are_disjoint_and_the_teacher_is_imperfect(tmp_path):
    settings = QuickstartSettings(sft_examples=600, n_train=300, n_test=200)
    data = CALCULATOR.prepare(tmp_path, settings)
    sft = [json.loads(line) for line in data.sft.read_text().splitlines()]
    train = pd.read_parquet(data.train)
    test = pd.read_parquet(data.test)
    pools = {
        "sft": {r["expression"] for r in sft},
        "train": {e["expression"] for e in train["extra_info"]},
        "test": {e["expression"] for e in test["extra_info"]},
    }
    assert [len(pools[k]) for k in ("sft", "train", "test")] == [600, 300, 200]
    assert not pools["sft"] & pools["train"]
    assert not pools["sft"] & pools["test"]
    assert not pools["train"] & pools["test"]
    assert all(expression_pool(e) == name for name, exprs in pools.items() for e in exprs)
    # The teacher answers directly on most questions of the direct phrasings, never on others.
    direct = [r for r in sft if r["phrasing"] in DIRECT_PHRASINGS]
    share = sum(not r["uses_tool"] for r in direct) / len(direct)
    assert 0.7 < share < 0.9
    assert all(r["messages"][-1]["content"] == f"<answer>{r['ground_truth']}</answer>" for r in sft)
    others = [r for r in sft if r["phrasing"] not in DIRECT_PHRASINGS]
    assert others and all(r["uses_tool"] for r in others)
    labels = data.groups["phrasing"]
    assert len(labels) == 200 and set(labels) == {"direct_phrasings", "tool_phrasings"}
    assert [label == "direct_phrasings" for label in labels] == [
        e["phrasing"] in DIRECT_PHRASINGS for e in test["extra_info"]
    ]


def test_check_disjoint_names_the_pools():
    check_disjoint({"a": {"1 + 2"}, "b": {"3 + 4"}})
    with pytest.raises(ValueError, match="the a and b pools share 1 items"):
        check_disjoint({"a": {"1 + 2"}, "b": {"1 + 2", "3 + 4"}})


def test_reward_curve_and_missing_export(tmp_path):
    history = [{"critic/score/mean": 0.25, "actor/pg_loss": -0.1, "other": 3.0}, {}]
    assert reward_curve(history) == [
        {"step": 1, "critic/score/mean": 0.25, "actor/pg_loss": -0.1},
        {"step": 2},
    ]
    cfg = load_config(RECIPE_CONFIG, [f"trainer.default_local_dir={tmp_path}"])
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    with pytest.raises(FileNotFoundError, match="global_step_3/actor/huggingface"):
        rl_model_dir(cfg)


def test_arguments_default_to_the_measured_settings():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--out-dir", "o", "--seed", "2", "data.max_response_length=64"])
    settings = settings_from_args(args)
    assert args.out_dir == "o"
    assert settings == QuickstartSettings(seed=2, overrides=("data.max_response_length=64",))
    assert settings_from_args(parser.parse_args(["--no-control"])).control is False
    search = settings_from_args(parser.parse_args(["--task", "search", "--steps", "3"]))
    assert search == settings_for("search", steps=3)
    assert (search.task, search.steps, search.n_test) == ("search", 3, SEARCH.defaults["n_test"])
    with pytest.raises(ValueError, match="unknown quickstart task 'x'"):
        settings_for("x")


def test_the_rl_stage_validates_on_a_slice_of_the_test_set_every_few_steps(tmp_path):
    from agentrl.quickstart.pipeline import write_val_slice
    from agentrl.quickstart.settings import rl_config
    from agentrl.tasks.quickstart import TaskData

    test = tmp_path / "test.parquet"
    pd.DataFrame({"data_source": ["a"] * 10, "i": range(10)}).to_parquet(test)
    settings = QuickstartSettings(val_freq=5, val_rows=4)
    val = write_val_slice(test, tmp_path / "val.parquet", settings.val_rows)
    assert pd.read_parquet(val)["i"].tolist() == [0, 1, 2, 3]  # the first test problems
    assert write_val_slice(test, tmp_path / "none.parquet", 0) is None
    data = TaskData(tmp_path / "sft.jsonl", tmp_path / "train.parquet", test, {})
    cfg = rl_config(tmp_path / "m", data, None, tmp_path / "rl", settings, val)
    assert cfg.data.val_files == str(val)
    assert cfg.trainer.test_freq == 5 and cfg.trainer.val_before_train  # a curve from step 0
    off = rl_config(tmp_path / "m", data, None, tmp_path / "rl",
                    QuickstartSettings(val_freq=0), val)  # fmt: skip
    assert off.data.val_files is None and not off.trainer.val_before_train
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    given = settings_from_args(parser.parse_args(["--val-freq", "2", "--val-rows", "32"]))
    assert (given.val_freq, given.val_rows) == (2, 32)
    assert (QuickstartSettings().val_freq, QuickstartSettings().val_rows) == (5, 64)


def test_a_run_stopped_mid_way_still_reports_what_it_has(tmp_path, monkeypatch):
    import agentrl.quickstart.pipeline as pipeline

    def broken_evaluation(*args, **kwargs):
        raise RuntimeError("evaluation crashed")

    monkeypatch.setattr(pipeline, "evaluate_model", broken_evaluation)
    out = tmp_path / "qs"
    settings = QuickstartSettings(sft_steps=2, sft_check=0, sft_examples=8, n_train=16, n_test=4)
    with pytest.raises(RuntimeError, match="evaluation crashed"):
        run_quickstart(out, settings)
    report = json.loads((out / "report.json").read_text())
    assert report["sft"]["steps"] == 2 and "eval_sft" not in report
    assert {"model", "data", "sft", "total", "report"} <= set(report["timing_s"])
    assert 'id="plot-stages"' in (out / "report.html").read_text()  # seconds per stage


@pytest.mark.slow
def test_ci_size_quickstart_learns_when_to_call_the_tool(tmp_path, caplog):
    """The same command on CI budgets (fewer GRPO steps, 128 test problems, no control) on
    a seed that changes with every CI run (AGENTRL_QUICKSTART_SEED, printed by .ci/run; a
    random one when unset): GRPO must raise held-out accuracy and the tool-call rate by a
    clear margin on any seed."""
    caplog.set_level(logging.INFO)
    seed = int(os.environ.get("AGENTRL_QUICKSTART_SEED") or secrets.randbelow(1000))
    print(f"CI quickstart seed: {seed} (AGENTRL_QUICKSTART_SEED={seed} reruns it)")
    out = tmp_path / "qs"
    report = run_quickstart(
        out, QuickstartSettings(seed=seed, steps=CI_RL_STEPS, n_test=128, control=False)
    )
    assert report["sft"]["stop_reason"] == "skill", report["sft"]["skill_check"]
    assert report == json.loads((out / "report.json").read_text())
    sft, rl = report["eval_sft"], report["eval_rl"]
    assert sft["trajectories"] == rl["trajectories"] == 128
    assert rl["accuracy"] - sft["accuracy"] >= 0.3, (sft["accuracy"], rl["accuracy"])
    assert rl["tool_call_rate"] - sft["tool_call_rate"] >= 0.3
    # what RL discovers: calling the tool on the phrasings the teacher answered directly
    assert sft["by_phrasing"]["direct_phrasings"]["tool_call_rate"] < 0.3
    assert rl["by_phrasing"]["direct_phrasings"]["tool_call_rate"] > 0.8
    assert set(report["timing_s"]) == {
        "model", "data", "sft", "eval_sft", "rl", "eval_rl", "report", "total"
    }  # fmt: skip
    assert len(report["rl"]) == CI_RL_STEPS
    page = (out / "report.html").read_text()
    assert "after GRPO" in page and "calculator" in page
    assert (out / "rl" / "metrics.jsonl").is_file() and (out / "rl" / "rollouts").is_dir()
    assert "stage eval_rl" in (out / "quickstart.log").read_text()
    # the validation during RL: a held-out curve from step 0, every val_freq steps
    metrics = [json.loads(line) for line in (out / "rl" / "metrics.jsonl").read_text().splitlines()]
    validated = [m["step"] for m in metrics if any(k.startswith("val-core/") for k in m)]
    assert validated == [0, 5, 10, 15, 20], validated
    points = re.search(r'id="plot-accuracy" data-points="([^"]*)"', page).group(1)
    assert json.loads(html.unescape(points))["held-out accuracy: validation (64 test problems)"] == 5
    assert '<tr data-group="direct_phrasings">' in page and 'id="plot-sft_loss"' in page


CI_RL_STEPS = 20


def test_the_sft_check_holds_out_tool_using_traces_and_trains_on_the_rest(tmp_path):
    from agentrl.data.sft import read_sft_rows
    from agentrl.quickstart.pipeline import sft_stop_rule
    from agentrl.utils.jsonl import write_jsonl

    rows = [{"messages": [{"role": "user", "content": str(i)}], "uses_tool": i % 3 != 0}
            for i in range(30)]  # fmt: skip
    path = write_jsonl(rows, tmp_path / "sft.jsonl")
    train, check = sft_stop_rule(path, QuickstartSettings(sft_check=0.7, sft_check_rows=5,
                                                          sft_extra_steps=9))  # fmt: skip
    held = [r["messages"][0]["content"] for r in check.rows]
    assert held == ["23", "25", "26", "28", "29"]  # the last five tool-using ones
    assert all(r["uses_tool"] for r in check.rows)
    assert len(train) == 25 and not {r["messages"][0]["content"] for r in train} & set(held)
    assert (check.threshold, check.extra_steps) == (0.7, 9)
    unchecked, none = sft_stop_rule(path, QuickstartSettings(sft_check=0))
    assert none is None and unchecked == read_sft_rows(path)
    with pytest.raises(ValueError, match="sft_check_rows=25 needs that many tool-using"):
        sft_stop_rule(path, QuickstartSettings(sft_check_rows=25))


def test_the_vllm_variant_runs_the_tiny_untied_model_and_only_grpo_on_vllm(tmp_path):
    from agentrl.quickstart.settings import rl_config
    from agentrl.tasks.quickstart import TaskData

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--rollout", "vllm", "--server-python", "/v/bin/python"])
    settings = settings_from_args(args)
    # vLLM's CPU attention refuses the nano model's 16-wide heads; tiny's are 32 wide
    assert (settings.size, settings.untied, settings.rollout) == ("tiny", True, "vllm")
    assert settings.server_python == "/v/bin/python"
    assert settings == QuickstartSettings(size="tiny", untied=True, sft_lr=1e-3, rl_lr=1.5e-4,
                                          rollout="vllm", server_python="/v/bin/python")  # fmt: skip
    # a flag given wins over the variant's default; the plain quickstart is unchanged
    assert settings_from_args(parser.parse_args(["--rollout", "vllm", "--size", "small"])).size \
        == "small"
    assert (QuickstartSettings().size, QuickstartSettings().untied) == ("nano", False)
    data = TaskData(tmp_path / "sft.jsonl", tmp_path / "train.parquet", tmp_path / "test.parquet", {})
    variant = rl_config(tmp_path / "m", data, tmp_path / "t.yaml", tmp_path / "rl", settings)
    rollout = variant.actor_rollout_ref.rollout
    assert (rollout.name, rollout.server_python) == ("vllm", "/v/bin/python")
    assert variant.actor_rollout_ref.actor.optim.lr == 1.5e-4  # the variant's GRPO lr
    plain_cfg = rl_config(tmp_path / "m", data, tmp_path / "t.yaml", tmp_path / "rl",
                          QuickstartSettings())  # fmt: skip
    plain = plain_cfg.actor_rollout_ref.rollout
    assert (plain.name, plain.server_python) == ("hf", None)
    assert plain_cfg.actor_rollout_ref.actor.optim.lr == 3e-4  # the recipe's, untouched
    # --rl-lr wins over the variant's, and reaches the config as given
    given = settings_from_args(parser.parse_args(["--rollout", "vllm", "--rl-lr", "2e-4"]))
    assert rl_config(tmp_path / "m", data, tmp_path / "t.yaml", tmp_path / "rl",
                     given).actor_rollout_ref.actor.optim.lr == 2e-4  # fmt: skip


def test_a_bad_rollout_or_server_python_is_named_before_any_stage(tmp_path):
    with pytest.raises(ValueError, match="rollout.name is 'nope'"):
        run_quickstart(tmp_path / "a", QuickstartSettings(rollout="nope"))
    with pytest.raises(ValueError, match="--server-python '/nowhere/python'"):
        run_quickstart(tmp_path / "b", settings_for("calculator", rollout="vllm",
                                                    server_python="/nowhere/python"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def _vllm_python() -> str:
    """vLLM's interpreter, found as the backend's own tests find it (a skip without it,
    unless CI requires it)."""
    from tests.rollout.backends.test_vllm import vllm_python

    return vllm_python()


@pytest.mark.vllm
@pytest.mark.slow
def test_the_vllm_variant_trains_on_a_vllm_server_whose_weights_are_verified(tmp_path):
    """`agentrl quickstart --rollout vllm` on small budgets: two GRPO steps on a vLLM
    server launched from its own interpreter, every sync verified on the server (checksums
    and the probe), the evaluations on the hf engine, the trained model exported and
    evaluated. The model is the tiny one with its output layer TIED (the variant's own
    `untied` default is checked above, without a server): vLLM's CPU build keeps a stale
    tied output layer after a reload (tests/rollout/backends/test_vllm.py's probe test),
    so its servers run an untied copy and every directory synced to them holds
    lm_head.weight (untie.py) while the trainer's model stays tied; the probe would fail
    the second sync, and the sampled log-probs would differ from the trainer's, if that
    path served a stale layer. 10 SFT steps teach no arithmetic, so every reward is 0 and
    GRPO alone would not move the weights: an entropy bonus does, so the second step
    samples from weights the server must have reloaded (learning itself is what
    bench/quickstart_seeds.py --rollout vllm measures)."""
    from safetensors.torch import load_file

    out = tmp_path / "qs"
    settings = settings_for(
        "calculator", rollout="vllm", server_python=_vllm_python(), untied=False, steps=2,
        sft_steps=10, sft_check=0, sft_examples=64, n_train=16, n_test=4, control=False,
        overrides=("actor_rollout_ref.rollout.launch_timeout=600",
                   "actor_rollout_ref.actor.entropy_coeff=0.01",
                   # 4 prompts x 4 samples a step, 2 optimizer steps each (the recipe's 16 x 8)
                   "data.train_batch_size=4", "actor_rollout_ref.rollout.n=4",
                   "actor_rollout_ref.actor.ppo_mini_batch_size=2"),
    )  # fmt: skip
    report = run_quickstart(out, settings)
    init = json.loads((out / "model_init" / "config.json").read_text())
    assert init["hidden_size"] // init["num_attention_heads"] == 32
    assert init["tie_word_embeddings"] is True
    logged = [json.loads(line) for line in (out / "rl" / "metrics.jsonl").read_text().splitlines()]
    # step 0: the validation before training (the quickstart's val_freq), then the two steps
    assert logged[0]["step"] == 0 and any(k.startswith("val-core/") for k in logged[0])
    metrics = logged[1:]
    assert [m["step"] for m in metrics] == [1, 2] and len(report["rl"]) == 2
    for m in metrics:  # the server held every tensor the trainer sent, after every update
        assert m["rollout/weights_verified"] == 1
        assert m["timing/weight_sync_s"] > 0 and m["actor/grad_norm"] > 0
        assert m["rollout/requests"] >= 4 * 4  # a step's 4 prompts x 4, multi-turn
        # vLLM sampled from the weights the trainer scores with (fp32 both: 3e-8 and 6e-9
        # apart in probability here, at most 2e-5 over a full 25-step run); at step 2 those
        # are the weights step 1 trained and synced
        assert m["training/rollout_probs_diff_max"] < 1e-4, m["training/rollout_probs_diff_max"]
    assert "name: vllm" in (out / "rl" / "config.yaml").read_text()
    # GRPO changed the weights it exported, and the evaluations ran on both models
    sft = load_file(out / "model_sft" / "model.safetensors")
    rl_dir = rl_model_dir(load_config(RECIPE_CONFIG, [f"trainer.default_local_dir={out / 'rl'}"]))
    rl = load_file(rl_dir / "model.safetensors")
    # the trainer's model stayed tied (only the servers' directories were untied)
    embeddings = "model.embed_tokens.weight"
    assert json.loads((rl_dir / "config.json").read_text())["tie_word_embeddings"] is True
    assert rl[embeddings].equal(rl.get("lm_head.weight", rl[embeddings]))
    # each Adam step moves a parameter with a gradient by about the lr (1.5e-4; 4 steps),
    # the embeddings (the tied output layer) among them
    assert max((sft[k] - rl[k]).abs().max().item() for k in sft) > 2e-4
    assert (sft[embeddings] - rl[embeddings]).abs().max().item() > 2e-4
    assert report["eval_sft"]["trajectories"] == report["eval_rl"]["trajectories"] == 4
    assert set(report["timing_s"]) == {
        "model", "data", "sft", "eval_sft", "rl", "eval_rl", "report", "total"
    }  # fmt: skip


def test_sft_that_hits_its_cap_before_the_skill_check_stops_the_run_with_status_3(
    tmp_path, capsys
):
    """Two SFT steps cannot pass the held-out check: `agentrl quickstart` stops after SFT
    (no evaluation, no RL) with one message and exit status 3; report.json and report.html
    say which target was missed."""
    from agentrl.quickstart import run

    out = tmp_path / "qs"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--out-dir", str(out), "--sft-steps", "2", "--sft-examples", "400",
                              "--n-train", "16", "--n-test", "4", "--steps", "1", "--no-control"])
    assert run(args) == 3
    err = capsys.readouterr().err
    assert f"{out}: stopped after the sft stage, which missed its target" in err
    assert "The stages after SFT did not run" in err and "--allow-missed-targets" in err
    report = json.loads((out / "report.json").read_text())
    assert report["sft"]["stop_reason"] == "cap" and report["sft"]["steps"] == 2
    sft = report["targets"]["sft"]
    assert (sft["target_met"], sft["stopped_run"], sft["threshold"]) == (False, True, 0.8)
    assert "eval_sft" not in report and not (out / "rl").exists()
    assert '<tr data-stage="sft" data-met="false">' in (out / "report.html").read_text()


def _fake_stages(monkeypatch, accuracy_of):
    """Stages that take no time: no model is made, SFT returns at once, evaluate_model
    scores each model as `accuracy_of(model_dir)`, RL records that it ran; returns the list
    RL appends its config to."""
    import agentrl.models.tiny
    import agentrl.quickstart.pipeline as pipeline
    import agentrl.trainer

    trained = []
    monkeypatch.setattr(agentrl.models.tiny, "make_tiny_model", lambda out, **kw: out)
    monkeypatch.setattr(pipeline, "sft_stage", lambda *a: ({"steps": 1, "stop_reason": "steps"}, []))
    monkeypatch.setattr(pipeline, "evaluate_model", lambda config, model_dir, *a: {
        "accuracy": accuracy_of(model_dir), "accuracy_stderr": 0.0, "sampled_accuracy": 0.0,
        "sampled_accuracy_stderr": 0.0, "tool_call_rate": 0.0})  # fmt: skip
    monkeypatch.setattr(agentrl.trainer, "run_train", lambda cfg: trained.append(cfg) or [])
    monkeypatch.setattr(pipeline, "rl_model_dir", lambda cfg: Path(cfg.trainer.default_local_dir))
    return trained


def test_a_teacher_below_its_student_stops_before_distillation_unless_allowed(
    tmp_path, monkeypatch
):
    from agentrl.quickstart.targets import TargetMissed

    teacher = tmp_path / "teacher"
    teacher.mkdir()
    (teacher / "config.json").write_text("{}")
    trained = _fake_stages(monkeypatch, lambda model_dir: 0.09 if model_dir == teacher else 0.344)
    settings = QuickstartSettings(teacher=str(teacher), steps=1, sft_examples=8, n_train=8,
                                  n_test=4, control=False)  # fmt: skip
    with pytest.raises(TargetMissed, match="Distillation did not run"):
        run_quickstart(tmp_path / "stopped", settings, check=False)
    report = json.loads((tmp_path / "stopped" / "report.json").read_text())
    assert report["teacher"]["accuracy"] == 0.09 and "eval_rl" not in report and not trained
    assert report["targets"]["teacher"] | {"target": "", "measured": ""} == {
        "target": "", "measured": "", "threshold": 0.344, "value": 0.09,
        "target_met": False, "stopped_run": True}  # fmt: skip
    assert "sft" not in report["targets"]  # the fake SFT ran without a check: no target
    for flag in ("allow_weak_teacher", "allow_missed_targets"):
        allowed = dataclasses.replace(settings, **{flag: True})
        report = run_quickstart(tmp_path / flag, allowed, check=False)
        assert report["targets"]["teacher"]["target_met"] is False
        assert report["targets"]["teacher"]["stopped_run"] is False
        assert "eval_rl" in report
    assert len(trained) == 2
    cfg = trained[0]
    assert cfg.algorithm.adv_estimator == "on_policy_distill"
