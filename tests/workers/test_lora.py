"""LoRA for the actor (agentrl/workers/lora.py): only the adapters train, the rollout
samples from the merged policy, and the HF export is the merged model."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from agentrl.distributed import InProcessWorkerGroup, WorkerSpec
from agentrl.protocol import DataProto
from agentrl.testing.workers import greedy_continuations, response_tokens, tiny_worker_config
from agentrl.workers import ActorRolloutRefWorker

P, R = 32, 16
LORA = ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8",
        "actor_rollout_ref.actor.optim.lr=5e-2", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "data.train_batch_size=4", f"data.max_prompt_length={P}",
        f"data.max_response_length={R}"]


def _prompts() -> DataProto:
    messages = [[{"role": "user", "content": text}]
                for text in ("what is 2+3?", "hello there", "the of and to in", "name a tool")]
    return DataProto.from_dict(non_tensors={"raw_prompt": messages}, meta_info={"validate": True})


def test_lora_trains_adapters_only_and_the_rollout_follows(varied_model_dir, tmp_path):
    cfg = tiny_worker_config(varied_model_dir, LORA)
    group = InProcessWorkerGroup(
        WorkerSpec(ActorRolloutRefWorker, cfg.actor_rollout_ref, role="actor_rollout", seed=0))
    group.init_model()
    try:
        initial = group.full_state_dict()[0]
        base = AutoModelForCausalLM.from_pretrained(varied_model_dir)
        # adapters start at zero: the merged policy is the base model, under its names
        assert set(initial) <= set(base.state_dict()) and "model.embed_tokens.weight" in initial
        for name, tensor in initial.items():
            torch.testing.assert_close(tensor, base.state_dict()[name])
        before = group.generate_sequences(_prompts())
        old = group.compute_log_prob(before).batch["old_log_probs"]
        mask = before.batch["response_mask"].bool()
        data = before.select(batch_keys=["prompts", "responses", "input_ids", "attention_mask",
                                         "position_ids", "response_mask"], deepcopy=True)
        data.batch["advantages"] = torch.linspace(-1, 1, len(data))[:, None] * mask
        data.batch["old_log_probs"] = old
        group.update_actor(data)  # syncs the rollout
        merged = group.full_state_dict()[0]
        changed = [n for n in merged if not torch.equal(merged[n], initial[n])]
        assert changed and all(n.endswith(".weight") for n in changed)
        # only Linear layers with adapters moved; embeddings and norms are frozen
        assert not any("embed" in n or "norm" in n for n in changed)
        after = group.generate_sequences(_prompts())
        base.load_state_dict(merged, strict=False)
        assert response_tokens(after) != response_tokens(before)
        assert all(t == g[: len(t)] for t, g in zip(
            response_tokens(after), greedy_continuations(base, after, R), strict=True))
        # the export is a plain HF model of the merged weights, plus the adapters
        export = tmp_path / "hf"
        group.export_hf(str(export))
        reloaded = AutoModelForCausalLM.from_pretrained(export)
        for name, tensor in merged.items():
            torch.testing.assert_close(reloaded.state_dict()[name], tensor)
        assert (export / "lora_adapter" / "adapter_config.json").is_file()
    finally:
        group.close()  # the worker's own close
        group.shutdown()
