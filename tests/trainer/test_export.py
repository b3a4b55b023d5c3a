"""`agentrl export` (agentrl/trainer/export.py) and the Hugging Face model every run leaves:
a trained run's checkpoints load with `from_pretrained` and give the trained model's logits;
LoRA merged or as the adapter; bad input is one message, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.cli import main as agentrl_main
from agentrl.trainer import PPOTrainer
from agentrl.utils.command import DEBUG_ENV

PROMPT = [{"role": "user", "content": "what is 12 * 7? use the calculator"}]


def _train(make_config, *overrides: str) -> tuple[Path, dict[str, torch.Tensor]]:
    """One GRPO step; returns the checkpoint root and the trained actor's full weights
    (merged, under the Hugging Face names)."""
    cfg = make_config("trainer.total_training_steps=1", *overrides)
    trainer = PPOTrainer(cfg)
    try:
        trainer.fit()
        weights = trainer.actor_rollout_wg.full_state_dict()[0]
    finally:
        trainer.close()
    return Path(str(cfg.trainer.default_local_dir)), weights


def _logits(model: torch.nn.Module, tokenizer) -> torch.Tensor:
    text = tokenizer.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits  # (1, T, V)


def _trained_model(model_dir: Path, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and all("lm_head" in k for k in missing)  # a tied head
    return model.eval()


def _export(*argv: str) -> int:
    return agentrl_main(["--log-level", "WARNING", "export", *argv])


def test_the_last_checkpoint_and_the_export_are_the_trained_model(make_config, tiny_model_dir,
                                                                  tmp_path):  # fmt: skip
    root, weights = _train(make_config)
    trained_tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    expected = _logits(_trained_model(tiny_model_dir, weights), trained_tokenizer)
    base = _logits(AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), trained_tokenizer)
    assert (expected - base).abs().max() > 1e-4  # the step moved the model

    # the run's last checkpoint holds a Hugging Face model, though save_contents does not
    # list hf_model (trainer.save_hf_model_at_end)
    in_run = root / "global_step_1" / "actor" / "huggingface"
    for folder, argv in ((in_run, None), (tmp_path / "from_root", [str(root)]),
                         (tmp_path / "from_step", [str(root / "global_step_1")]),
                         (tmp_path / "from_actor", [str(root / "global_step_1" / "actor")])):
        if argv is not None:
            assert _export(*argv, "--out", str(folder)) == 0
        tokenizer = AutoTokenizer.from_pretrained(folder)
        assert tokenizer.get_vocab() == trained_tokenizer.get_vocab()
        assert tokenizer.chat_template == trained_tokenizer.chat_template
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        torch.testing.assert_close(_logits(model, tokenizer), expected, atol=1e-5, rtol=0)


def test_without_save_hf_model_at_end_the_checkpoint_is_only_save_contents(make_config):
    root, _ = _train(make_config, "trainer.save_hf_model_at_end=false")
    assert sorted(p.name for p in (root / "global_step_1" / "actor").iterdir()) == [
        "dcp", "extra_rank0.pt"]


def test_lora_exports_merged_or_as_the_adapter(make_config, tiny_model_dir, tmp_path):
    pytest.importorskip("peft")
    from peft import PeftModel

    root, merged = _train(make_config, "actor_rollout_ref.model.lora_rank=4",
                          "actor_rollout_ref.model.lora_alpha=8",
                          "actor_rollout_ref.actor.optim.lr=5e-2")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    expected = _logits(_trained_model(tiny_model_dir, merged), tokenizer)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    assert (expected - _logits(base, tokenizer)).abs().max() > 1e-4

    assert _export(str(root), "--out", str(tmp_path / "merged")) == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    torch.testing.assert_close(_logits(model, tokenizer), expected, atol=1e-5, rtol=0)
    assert not any("lora" in name for name in model.state_dict())

    assert _export(str(root), "--out", str(tmp_path / "adapter"), "--adapter") == 0
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert not list((tmp_path / "adapter").glob("model*.safetensors"))  # the adapter only
    adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "adapter")
    torch.testing.assert_close(_logits(adapted, tokenizer), expected, atol=1e-5, rtol=0)


@pytest.fixture
def fake_run(tmp_path, tiny_model_dir):
    """A checkpoint root with the layout (no real weights: every check here comes first)."""
    root = tmp_path / "run"
    (root / "global_step_3" / "actor" / "dcp").mkdir(parents=True)
    (root / "config.yaml").write_text(
        f"actor_rollout_ref:\n  model:\n    path: {tiny_model_dir}\n    lora_rank: 0\n")
    return root


def test_bad_input_is_one_message_and_exit_2(fake_run, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "empty").mkdir()
    cases = [
        ([str(tmp_path / "nope"), "--out", "o"],
         f"checkpoint directory {tmp_path / 'nope'} does not exist"),
        ([str(tmp_path / "file.txt"), "--out", "o"],
         f"{tmp_path / 'file.txt'} is a file, not a checkpoint directory"),
        ([str(tmp_path / "empty"), "--out", "o"],
         f"{tmp_path / 'empty'} is not a checkpoint directory: it holds no global_step_<N> "
         "directory and no latest_checkpointed_iteration.txt (give a run's "
         "trainer.default_local_dir, or one global_step_<N> in it)"),
        ([str(fake_run), "--out", str(tmp_path / "file.txt")],
         f"--out {tmp_path / 'file.txt'} is a file; give a directory to write the model into"),
        ([str(fake_run), "--out", str(tmp_path / "full")],
         f"--out {tmp_path / 'full'} is not empty; give a new or empty directory"),
        ([str(fake_run), "--out", str(tmp_path / "o"), "--adapter"],
         "--adapter: the run trained no LoRA adapters (actor_rollout_ref.model.lora_rank is 0); "
         "export the full model"),
        ([str(fake_run), "--out", str(tmp_path / "o"), "--config", str(tmp_path / "c.yaml")],
         f"no run config at {tmp_path / 'c.yaml'}: agentrl train writes config.yaml beside the "
         "checkpoints; give the run's resolved config with --config"),
        ([str(fake_run), "--out", str(tmp_path / "o"), "--model", str(tmp_path / "gone")],
         f"the run's base model {tmp_path / 'gone'} (actor_rollout_ref.model.path) is not on "
         "this machine; give its directory with --model"),
        ([str(fake_run), "--out", str(tmp_path / "o"), "--model", str(tmp_path / "empty")],
         f"the base model {tmp_path / 'empty'} is not a Hugging Face model directory (no "
         "config.json); give the run's with --model"),
        ([str(fake_run), "--out", str(tmp_path / "file.txt" / "o")],
         f"--out {tmp_path / 'file.txt' / 'o'} is under {tmp_path / 'file.txt'}, which is a "
         "file, not a directory"),
        ([str(fake_run), "--out", "/proc/agentrl-no/o"],
         "--out /proc/agentrl-no/o: cannot write in /proc (No such file or directory)"),
    ]
    for argv, message in cases:
        assert _export(*argv) == 2, argv
        assert capsys.readouterr().err == message + "\n"
    (fake_run / "global_step_4").mkdir()  # the newest step, without an actor
    assert _export(str(fake_run), "--out", str(tmp_path / "o")) == 2
    assert capsys.readouterr().err == (
        f"{fake_run / 'global_step_4'} holds no sharded actor model "
        f"({fake_run / 'global_step_4' / 'actor' / 'dcp'} is missing): not a checkpoint of "
        "agentrl train\n")
    assert not (tmp_path / "o").exists()
