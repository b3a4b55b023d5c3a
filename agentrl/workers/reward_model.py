"""RewardModelWorker: a learned reward model (``reward_model.enable``), sharded with FSDP2.

    group = RayWorkerGroup(pool, WorkerSpec(RewardModelWorker, cfg.reward_model))
    group.init_model()
    batch = batch.union(group.compute_rm_score(batch))     # rm_scores (B, R)

The model is ``AutoModelForSequenceClassification`` with one label, loaded from
``reward_model.model.path``: it reads a whole trajectory (prompt and response, tool turns
included) and gives one scalar, placed on the last attended response token of
``rm_scores`` (0 elsewhere; a trajectory without response tokens gets none). As in verl,
the reward managers then return ``rm_scores`` as the reward instead of calling
``compute_score`` (agentrl/reward/base.py).

When the reward model's tokenizer is the policy's (same vocabulary and chat template) it
reads the rollout's token ids; otherwise the trajectory's ``messages`` are rendered with
the reward model's own chat template (verl re-templates the same way). A sequence longer
than ``reward_model.max_length`` keeps its last ``max_length`` tokens (the answer).
Forward passes run in micro-batches of ``micro_batch_size_per_gpu`` (null: all at once),
each row right-padded so the model pools at its last real token.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from agentrl.distributed import Dispatch, Worker, register
from agentrl.protocol import DataProto
from agentrl.reward.base import scores_on_last_token
from agentrl.workers.fsdp import build_sharded_model, device_mesh

logger = logging.getLogger(__name__)


class _ModelConfig:
    """The fields ``load_model`` reads, from ``reward_model.model``."""

    def __init__(self, cfg: Any) -> None:
        self.path = cfg.path
        self.external_lib = cfg.external_lib
        self.trust_remote_code = bool(cfg.trust_remote_code)
        self.override_config = dict(cfg.override_config or {})
        self.enable_gradient_checkpointing = False  # forward only


class RewardModelWorker(Worker):
    """See the module docstring; ``config`` is the ``reward_model`` sub-config."""

    def __init__(self, config: Any, seed: int = 0) -> None:
        self.config = config
        self.seed = seed
        self.model: torch.nn.Module | None = None
        self.tokenizer: Any = None
        self.input_tokenizer: Any = None
        self.same_tokenizer = True

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the reward model and both tokenizers; shard the model."""
        cfg = self.config
        trust = bool(cfg.model.trust_remote_code)
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model.path, trust_remote_code=trust)
        self.input_tokenizer = AutoTokenizer.from_pretrained(
            cfg.model.input_tokenizer, trust_remote_code=trust
        )
        self.same_tokenizer = (
            self.tokenizer.get_vocab() == self.input_tokenizer.get_vocab()
            and self.tokenizer.chat_template == self.input_tokenizer.chat_template
        )
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        self.pad_token_id = int(pad)
        mesh = device_mesh(self.world_size, self.device, cfg.model.fsdp_config.fsdp_size)
        self.model = build_sharded_model(
            _ModelConfig(cfg.model), cfg.model.fsdp_config, AutoModelForSequenceClassification,
            mesh, self.device,
            config_fields={"num_labels": 1, "pad_token_id": self.pad_token_id},
        )  # fmt: skip
        self.model.eval()
        logger.info("reward model %s loaded (%s tokenizer)", cfg.model.path,
                    "the policy's" if self.same_tokenizer else "its own")

    @register(Dispatch.DP_COMPUTE, pad=True)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores`` (B, R): the reward model's score on each trajectory's last
        attended response token."""
        if self.model is None:
            raise RuntimeError("compute_rm_score before init_model")
        sequences = [self._sequence(data, i) for i in range(len(data))]
        scores = self._score(sequences)  # (B,)
        rm_scores = scores_on_last_token(
            scores.tolist(), data.batch["attention_mask"], data.batch["responses"].shape[-1]
        )
        return DataProto.from_dict(tensors={"rm_scores": rm_scores})

    def _sequence(self, data: DataProto, i: int) -> list[int]:
        """The token ids the reward model reads for trajectory ``i`` (last max_length)."""
        if self.same_tokenizer or "messages" not in data.non_tensor_batch:
            mask = data.batch["attention_mask"][i].bool()
            ids = data.batch["input_ids"][i][mask].tolist()
        else:
            ids = self.tokenizer.apply_chat_template(
                list(data.non_tensor_batch["messages"][i]), tokenize=True
            )
            ids = list(ids["input_ids"] if isinstance(ids, Mapping) else ids)
        limit = self.config.max_length
        return ids[-int(limit):] if limit else ids

    @torch.no_grad()
    def _score(self, sequences: list[list[int]]) -> torch.Tensor:
        """One scalar per sequence, in micro-batches of right-padded rows."""
        size = self.config.micro_batch_size_per_gpu or len(sequences) or 1
        scores = []
        for start in range(0, len(sequences), size):
            chunk = sequences[start : start + size]
            longest = max(len(s) for s in chunk)
            ids = torch.full((len(chunk), longest), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), longest), dtype=torch.long)
            for row, seq in enumerate(chunk):
                ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                mask[row, : len(seq)] = 1
            out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                             use_cache=False)
            scores.append(out.logits.float().reshape(len(chunk), -1)[:, 0].cpu())
        return torch.cat(scores) if scores else torch.zeros(0)


__all__ = ["RewardModelWorker"]
