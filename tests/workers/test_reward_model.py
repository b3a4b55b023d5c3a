"""RewardModelWorker: a sequence-classification reward model scores whole trajectories,
from the rollout's tokens or, with a tokenizer of its own, from the re-rendered messages."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from agentrl.distributed import InProcessWorkerGroup, WorkerSpec
from agentrl.reward import NaiveRewardManager
from agentrl.testing.workers import make_trajectory_batch, tiny_worker_config
from agentrl.workers.reward_model import RewardModelWorker

P, R = 24, 12


def _write_reward_model(policy_dir: Path, out: Path, chat_template: str | None = None) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        policy_dir, num_labels=1, pad_token_id=tokenizer.pad_token_id)
    torch.nn.init.normal_(model.score.weight, std=1.0)  # scores that differ between inputs
    model.save_pretrained(out)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(out)
    return out


def _group(policy_dir: Path, rm_dir: Path, *extra: str):
    cfg = tiny_worker_config(policy_dir, [f"data.max_prompt_length={P}",
                                     f"data.max_response_length={R}",
                                     "reward_model.enable=true",
                                     f"reward_model.model.path={rm_dir}", *extra])
    group = InProcessWorkerGroup(WorkerSpec(RewardModelWorker, cfg.reward_model, seed=0))
    group.init_model()
    return group


def _direct(rm_dir: Path, ids: list[int]) -> float:
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir).eval()
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([ids])).logits[0, 0])


def test_scores_the_trajectory_tokens_on_the_last_response_token(tiny_model_dir, tmp_path):
    rm_dir = _write_reward_model(tiny_model_dir, tmp_path / "rm")
    with _group(tiny_model_dir, rm_dir, "reward_model.micro_batch_size_per_gpu=3") as group:
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
        batch = make_trajectory_batch(5, P, R, vocab_size=len(tokenizer), seed=1)
        rm_scores = group.compute_rm_score(batch).batch["rm_scores"]
        assert rm_scores.shape == (5, R)
        attention = batch.batch["attention_mask"]
        for i in range(5):
            last = int(torch.nonzero(attention[i, -R:]).max())
            assert torch.count_nonzero(rm_scores[i]) == 1 and rm_scores[i, last] != 0
            ids = batch.batch["input_ids"][i][attention[i].bool()].tolist()
            assert rm_scores[i, last].item() == pytest.approx(_direct(rm_dir, ids), abs=1e-4)
        assert len(set(rm_scores.sum(-1).tolist())) == 5  # the inputs are told apart
        # as in verl, the reward managers return the reward model's scores as the reward
        batch.batch["rm_scores"] = rm_scores
        out = NaiveRewardManager(tokenizer)(batch, return_dict=True)
        assert torch.equal(out["reward_tensor"], rm_scores)
        assert out["reward_extra_info"]["rm_score"] == rm_scores.sum(-1).tolist()


def test_a_reward_model_with_its_own_template_reads_the_messages(tiny_model_dir, tmp_path):
    template = ("{% for m in messages %}<<{{ m['role'] }}>> {{ m['content'] }}\n{% endfor %}")
    rm_dir = _write_reward_model(tiny_model_dir, tmp_path / "rm", chat_template=template)
    with _group(tiny_model_dir, rm_dir, "reward_model.max_length=8") as group:
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
        batch = make_trajectory_batch(2, P, R, vocab_size=len(tokenizer), seed=2)
        messages = [[{"role": "user", "content": "what is 6 times 7"},
                     {"role": "assistant", "content": f"it is {42 + i}"}] for i in range(2)]
        batch.non_tensor_batch["messages"] = np.array(messages + [None], dtype=object)[:2]
        rm_scores = group.compute_rm_score(batch).batch["rm_scores"].sum(-1)
        rm_tokenizer = AutoTokenizer.from_pretrained(rm_dir)
        for i in range(2):
            ids = rm_tokenizer.apply_chat_template(messages[i], tokenize=True)
            ids = list(ids["input_ids"] if isinstance(ids, Mapping) else ids)[-8:]  # max_length
            assert rm_scores[i].item() == pytest.approx(_direct(rm_dir, ids), abs=1e-4)
