"""SFT trainer: the masked loss, a lower loss after training, a loadable saved model."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.tasks.arithmetic_sft import make_arithmetic_sft_rows, write_arithmetic_sft_dataset
from agentrl.trainer.sft import masked_lm_loss, run_sft


def test_masked_lm_loss_counts_only_masked_targets():
    logits = torch.zeros(1, 4, 3)  # uniform: every token costs log(3)
    logits[0, 0, 2] = 10.0  # position 0 predicts token 2 confidently (its target is masked)
    input_ids = torch.tensor([[0, 2, 1, 1]])
    loss_mask = torch.tensor([[0, 0, 1, 1]])
    loss, n = masked_lm_loss(logits, input_ids, loss_mask)
    assert n.item() == 2
    assert loss.item() == pytest.approx(math.log(3))
    loss_all, n_all = masked_lm_loss(logits, input_ids, torch.ones_like(loss_mask))
    expected = (2 * math.log(3) + -torch.log_softmax(logits[0, 0], -1)[2].item()) / 3
    assert (n_all.item(), loss_all.item()) == (3, pytest.approx(expected))


def short_rows(n: int, seed: int) -> list[dict]:
    """Calculator trajectories without the long system prompt and schemas (fast on CPU)."""
    return [{"messages": row["messages"][1:]} for row in make_arithmetic_sft_rows(n, "train", seed)]


def test_sft_lowers_the_loss_and_saves_a_loadable_model(tmp_path, tiny_model_dir):
    rows = short_rows(8, seed=0)
    out = tmp_path / "sft"
    metrics = run_sft(
        tiny_model_dir, rows, out, epochs=3, lr=3e-3, batch_size=4, max_length=1024, seed=0
    )
    assert metrics["steps"] == 6
    assert metrics["examples"] == 8
    assert len(metrics["epoch_losses"]) == 3
    assert metrics["loss_after"] < 0.8 * metrics["loss_before"]
    assert metrics["epoch_losses"][-1] < metrics["epoch_losses"][0]
    model = AutoModelForCausalLM.from_pretrained(out)
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    changed = [
        not torch.equal(a, b) for a, b in zip(model.parameters(), initial.parameters(), strict=True)
    ]
    assert all(changed)
    assert (
        AutoTokenizer.from_pretrained(out).get_vocab()
        == AutoTokenizer.from_pretrained(tiny_model_dir).get_vocab()
    )


def test_sft_is_deterministic_and_reads_files(tmp_path, tiny_model_dir):
    path = write_arithmetic_sft_dataset(tmp_path / "sft.jsonl", 2, seed=1)
    first = run_sft(
        tiny_model_dir,
        path,
        tmp_path / "a",
        epochs=1,
        lr=1e-3,
        batch_size=2,
        max_length=1024,
        seed=5,
    )
    second = run_sft(
        tiny_model_dir,
        str(path),
        tmp_path / "b",
        epochs=1,
        lr=1e-3,
        batch_size=2,
        max_length=1024,
        seed=5,
    )
    assert first["epoch_losses"] == second["epoch_losses"]
    assert first["loss_after"] == second["loss_after"]
    assert first["assistant_tokens"] == second["assistant_tokens"] > 0


def test_bad_arguments_are_named(tmp_path, tiny_model_dir):
    with pytest.raises(ValueError, match="epochs and batch_size must be >= 1"):
        run_sft(tiny_model_dir, [], tmp_path, epochs=0)
    with pytest.raises(ValueError, match="no SFT examples"):
        run_sft(tiny_model_dir, [], tmp_path, epochs=1)


def test_batch_loss_equals_the_full_masked_loss(tiny_model_dir):
    """The fast path (no attention mask, output layer only at trained positions) gives
    the loss of the full forward with the attention mask, on a right-padded batch."""
    from transformers import AutoTokenizer

    from agentrl.data.sft import SFTDataset, sft_collate_fn
    from agentrl.trainer.sft import batch_loss

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    examples = SFTDataset(short_rows(6, seed=3), tokenizer, max_length=1024).examples
    batch = sft_collate_fn(examples, tokenizer.pad_token_id)
    assert (batch["attention_mask"] == 0).any()  # rows of different lengths: padding
    full = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
    ).logits
    expected, expected_n = masked_lm_loss(full, batch["input_ids"], batch["loss_mask"])
    loss, n = batch_loss(model, batch)
    assert n.item() == expected_n.item() > 0
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)
    loss.backward()  # and it trains
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0
