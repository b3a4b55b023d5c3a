"""verl's way in: --config-path/--config-name, Hydra defaults lists and searchpath, Hydra
overrides, verl's inert keys and value spellings (agentrl/config/compose.py, verl_keys.py)."""

from __future__ import annotations

import logging
import textwrap

import pytest

from agentrl.cli import main
from agentrl.config import ConfigError, load_config

# Written from verl's documented format (examples/sglang_multiturn/config/*.yaml).
VERL_YAML = textwrap.dedent("""
    hydra:
      searchpath:
        - file://verl/trainer/config

    defaults:
      - ppo_trainer
      - _self_

    data:
      max_prompt_length: 1024
      max_response_length: 1024
      train_batch_size: 256
      return_raw_chat: True

    actor_rollout_ref:
      hybrid_engine: True
      rollout:
        name: sglang
        multi_turn:
          enable: True
          max_assistant_turns: 5
          format: qwen
""")

# The override list of verl's GSM8K multi-turn run script (run_qwen2.5-3b_gsm8k_multiturn.sh),
# as a verl user runs it.
VERL_GSM8K_SCRIPT = [
    "algorithm.adv_estimator=grpo", "data.train_batch_size=256", "data.max_prompt_length=1024",
    "data.max_response_length=1024", "data.filter_overlong_prompts=True",
    "data.truncation='error'", "data.return_raw_chat=True",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl", "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "global_profiler.tool=torch_memory", "global_profiler.save_path=./mem_snapshots",
    "global_profiler.global_tool_config.torch_memory.trace_alloc_max_entries=100000",
    "global_profiler.global_tool_config.torch_memory.stack_depth=32",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.gpu_memory_utilization=0.85",
    "actor_rollout_ref.rollout.multi_stage_wake_up=True", "actor_rollout_ref.rollout.n=16",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "actor_rollout_ref.rollout.over_sample_rate=0.1", "algorithm.use_kl_in_reward=False",
    "trainer.critic_warmup=0", "trainer.logger=[\"console\",\"wandb\"]",
    "trainer.project_name='multi-turn-grpo-qwen2.5-3b-sglang'",
    "trainer.experiment_name=qwen2.5-3b_baseline", "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1", "trainer.save_freq=-1", "trainer.test_freq=20",
    "trainer.val_before_train=True", "data.train_files=/data/gsm8k/train.parquet",
    "data.val_files=/data/gsm8k/test.parquet",
    "actor_rollout_ref.rollout.multi_turn.tool_config_path=/cfg/tool_config/gsm8k_tool_config.yaml",
    "trainer.total_epochs=15",
]  # fmt: skip


@pytest.fixture
def verl_dir(tmp_path):
    (tmp_path / "gsm8k_multiturn_grpo.yaml").write_text(VERL_YAML)
    return tmp_path


def test_a_verl_config_composes_over_agentrl_defaults(verl_dir):
    cfg = load_config(config_dir=verl_dir, config_name="gsm8k_multiturn_grpo")
    assert cfg.data.max_prompt_length == 1024 and cfg.data.train_batch_size == 256
    assert cfg.actor_rollout_ref.rollout.prompt_length == 1024  # interpolations follow
    assert cfg.actor_rollout_ref.rollout.name == "sglang"
    assert cfg.actor_rollout_ref.rollout.multi_turn.format == "hermes"  # verl's `qwen`
    assert cfg.trainer.seed == 42  # everything else: agentrl's defaults


def test_hydra_overrides_add_force_and_delete(verl_dir):
    cfg = load_config(config_dir=verl_dir, config_name="gsm8k_multiturn_grpo.yaml", overrides=[
        "data.max_prompt_length=64",              # a key the file sets
        "+trainer.experiment_name=x",             # + on a key agentrl already has
        "++actor_rollout_ref.rollout.n=4",
        "+actor_rollout_ref.model.override_config.attention_dropout=0.1",  # open mapping
        "~actor_rollout_ref.rollout.multi_turn.max_assistant_turns",        # back to default
        "actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16",
    ])  # fmt: skip
    assert cfg.data.max_prompt_length == 64 and cfg.actor_rollout_ref.rollout.prompt_length == 64
    assert cfg.trainer.experiment_name == "x" and cfg.actor_rollout_ref.rollout.n == 4
    assert cfg.actor_rollout_ref.model.override_config.attention_dropout == 0.1
    assert cfg.actor_rollout_ref.rollout.multi_turn.max_assistant_turns is None
    assert cfg.actor_rollout_ref.actor.fsdp_config.model_dtype == "bf16"
    assert cfg.actor_rollout_ref.ref.fsdp_config.model_dtype == "bf16"  # interpolation
    deleted = load_config(overrides=["+actor_rollout_ref.model.override_config.a=1",
                                     "~actor_rollout_ref.model.override_config.a"])
    assert "a" not in deleted.actor_rollout_ref.model.override_config
    restored = load_config(overrides=["data.seed=3", "~data.seed", "trainer.seed=5"])
    assert restored.data.seed == 5  # the default interpolation ${trainer.seed}, not 42


def test_agentrl_defaults_win_over_a_verl_checkout_on_the_search_path(verl_dir, monkeypatch):
    # run from a verl checkout: file://verl/trainer/config exists and has its own ppo_trainer
    verl_config = verl_dir / "verl" / "trainer" / "config"
    verl_config.mkdir(parents=True)
    (verl_config / "ppo_trainer.yaml").write_text("trainer:\n  seed: 1234\n  verl_only: 1\n")
    monkeypatch.chdir(verl_dir)
    cfg = load_config(config_dir=".", config_name="gsm8k_multiturn_grpo")
    assert cfg.trainer.seed == 42


def test_unknown_keys_name_their_source(verl_dir):
    (verl_dir / "typo.yaml").write_text("defaults:\n  - ppo_trainer\n  - _self_\n"
                                        "data:\n  max_promt_length: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(config_dir=verl_dir, config_name="typo",
                    overrides=["actor_rollout_ref.rollout.nn=2", "+foo.bar=1"])
    problems = err.value.problems
    assert len(problems) == 3
    assert any("data.max_promt_length (from config 'typo'" in p
               and "did you mean data.max_prompt_length" in p for p in problems)
    assert any("actor_rollout_ref.rollout.nn (from override 'actor_rollout_ref.rollout.nn=2')"
               in p for p in problems)
    assert any("unknown config key foo (from override '+foo.bar=1')" in p for p in problems)


def test_verl_keys_without_meaning_here_are_dropped_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="agentrl.config.loader"):
        cfg = load_config(overrides=[
            "global_profiler.tool=nsys", "+actor_rollout_ref.rollout.multi_stage_wake_up=True",
            "actor_rollout_ref.rollout.trace.backend=weave",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        ])  # fmt: skip
    (record,) = [r for r in caplog.records if "no effect" in r.getMessage()]
    for key in ("global_profiler", "multi_stage_wake_up", "rollout.trace",
                "actor.megatron"):
        assert key in record.getMessage()
    assert "global_profiler" not in cfg


def test_config_lookup_errors(verl_dir):
    with pytest.raises(ConfigError, match=r"config 'nope' not found in .* gsm8k_multiturn_grpo"):
        load_config(config_dir=verl_dir, config_name="nope")
    with pytest.raises(ConfigError, match="needs --config-name"):
        load_config(config_dir=verl_dir)
    with pytest.raises(ConfigError, match="config directory not found"):
        load_config(config_dir=verl_dir / "missing", config_name="x")


def test_verl_stock_config_names_resolve_to_agentrl_defaults(tmp_path):
    (tmp_path / "mega.yaml").write_text("defaults:\n  - ppo_megatron_trainer\n  - _self_\n")
    assert load_config(config_dir=tmp_path, config_name="mega") == load_config()
    assert load_config(config_name="ppo_trainer") == load_config()


def test_config_command_takes_verls_command_line(verl_dir, capsys):
    argv = ["config", f"--config-path={verl_dir}", "--config-name=gsm8k_multiturn_grpo",
            *VERL_GSM8K_SCRIPT]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "over_sample_rate: 0.1" in out and "train_batch_size: 256" in out
    assert "global_profiler" not in out and "${" not in out
    assert main(["config", "-cp", str(verl_dir), "-cn", "gsm8k_multiturn_grpo",
                 "data.trian_batch_size=1"]) == 2
    assert "did you mean data.train_batch_size" in capsys.readouterr().err
    assert main(["config", "--config", "x.yaml", "--config-name", "y"]) == 2


def test_older_and_newer_verl_names_map_to_agentrls(tmp_path):
    (tmp_path / "old.yaml").write_text(textwrap.dedent("""
        defaults:
          - ppo_trainer
          - _self_
        actor_rollout_ref:
          rollout:
            name: sglang_async
            mode: sync
            multi_turn:
              max_turns: 2
        ray_kwargs:
          ray_init:
            num_cpus: 3
    """))
    cfg = load_config(config_dir=tmp_path, config_name="old",
                      overrides=["actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent"])
    rollout = cfg.actor_rollout_ref.rollout
    assert (rollout.name, rollout.mode, rollout.multi_turn.max_assistant_turns) == (
        "sglang", "async", 2)
    assert cfg.ray_init.num_cpus == 3 and "ray_kwargs" not in cfg
    over = load_config(overrides=["actor_rollout_ref.rollout.multi_turn.max_turns=4"])
    assert over.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 4
