"""A tied model served untied: the launch copy, the synced directories, the config check."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from agentrl.rollout.backends.registry import BackendPlugin
from agentrl.rollout.backends.untie import (
    is_tied,
    tied_output_problems,
    untied_tensors,
    write_untied_copy,
)
from agentrl.workers.checkpoint import export_hf


def _weights(directory) -> dict[str, torch.Tensor]:
    out = {}
    for shard in sorted(directory.glob("*.safetensors")):
        out.update(load_file(shard))
    return out


def test_the_served_copy_has_an_output_layer_equal_to_the_embeddings(tiny_model_dir, tmp_path):
    assert is_tied(tiny_model_dir)
    served = write_untied_copy(tiny_model_dir, tmp_path / "served")
    config = json.loads((served / "config.json").read_text())
    assert config["tie_word_embeddings"] is False and not is_tied(served)
    weights = _weights(served)
    assert torch.equal(weights["lm_head.weight"], weights["model.embed_tokens.weight"])
    assert (served / "tokenizer.json").is_symlink()  # linked, not copied
    tied = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    untied = AutoModelForCausalLM.from_pretrained(served)
    assert untied.lm_head.weight.data_ptr() != untied.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([[1, 5, 9, 30, 2]])
    with torch.no_grad():
        assert torch.equal(tied(ids).logits, untied(ids).logits)


def test_a_synced_directory_of_a_tied_model_is_untied_with_the_updated_embeddings(
        tiny_model_dir, tmp_path):  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    before = model.model.embed_tokens.weight.detach().clone()
    model(input_ids=torch.tensor([[1, 5, 9, 30]]), labels=torch.tensor([[1, 5, 9, 30]])).loss.backward()
    optimizer.step()
    embed = model.model.embed_tokens.weight.detach()
    assert not torch.equal(embed, before)
    out = export_hf(tmp_path / "step_1", model, bucket_bytes=64 << 10, untie=True)
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False
    weights = _weights(out)
    assert torch.equal(weights["lm_head.weight"], embed)
    assert torch.equal(weights["model.embed_tokens.weight"], embed)
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert "lm_head.weight" in index
    # the trainer's model stays tied
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.config.tie_word_embeddings
    plain = export_hf(tmp_path / "plain", model, bucket_bytes=64 << 10)
    assert "lm_head.weight" not in _weights(plain)


def test_untied_tensors_adds_only_a_missing_output_layer():
    embed = torch.ones(3, 2)
    out = untied_tensors({"model.embed_tokens.weight": embed})
    assert torch.equal(out["lm_head.weight"], embed)
    assert out["lm_head.weight"].data_ptr() != embed.data_ptr()
    assert "lm_head.weight" not in untied_tensors({"model.norm.weight": embed})
    own = torch.zeros(3, 2)
    kept = untied_tensors({"model.embed_tokens.weight": embed, "lm_head.weight": own})
    assert kept["lm_head.weight"] is own


class _Stale(BackendPlugin):
    name = "stale"

    def updates_tied_output(self, rollout):
        return False


def test_the_config_check_refuses_what_cannot_be_served_untied(tiny_model_dir, tmp_path):
    rollout = {"name": "stale", "server_urls": []}
    assert tied_output_problems(_Stale(), rollout, str(tiny_model_dir)) == []
    assert tied_output_problems(BackendPlugin(), {**rollout, "server_urls": ["http://x"]},
                                str(tiny_model_dir)) == []  # fmt: skip
    [problem] = tied_output_problems(_Stale(), {**rollout, "server_urls": ["http://x:1"]},
                                     str(tiny_model_dir))  # fmt: skip
    assert "ties its output layer" in problem and "server_urls" in problem
    assert "tie_word_embeddings: false" in problem
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    [problem] = tied_output_problems(_Stale(), rollout, str(bare))
    assert "holds no safetensors weights" in problem
    untied = write_untied_copy(tiny_model_dir, tmp_path / "untied")
    assert tied_output_problems(_Stale(), {**rollout, "server_urls": ["http://x"]},
                                str(untied)) == []  # fmt: skip
