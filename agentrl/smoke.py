"""`agentrl smoke`: the training pipeline end to end for a few steps, on CPU, offline.

    agentrl smoke --out-dir outputs/smoke --steps 3

It builds a tiny Qwen2 model and an arithmetic dataset, then for each step reads a batch
through RLHFDataset, samples `n` single-turn responses per prompt with transformers'
`generate`, scores them with the reward manager, computes GRPO advantages and does one
PPO-clip update of the model in this process. Metrics go to `OUT_DIR/metrics.jsonl`.

It is a smoke test of the pieces (config, data, DataProto, rewards, algorithms), not the
trainer: no tools, no rollout engine, no Ray. The reward is the arithmetic scorer plus a
small shaping term for plain-text output (`smoke_compute_score`, loaded as a custom reward
function from this file), so a random tiny model gets rewards that differ within a group
and the update has a gradient to follow.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.algos import agg_loss, compute_advantage, get_policy_loss_fn, logprobs_from_logits
from agentrl.config import load_config
from agentrl.data import create_rl_dataset, create_train_dataloader
from agentrl.data.arithmetic import write_arithmetic_dataset
from agentrl.models.tiny import make_tiny_model
from agentrl.protocol import DataProto
from agentrl.reward import default_compute_score, load_reward_manager

logger = logging.getLogger(__name__)


def smoke_compute_score(data_source: str, solution_str: str, ground_truth: Any,
                        extra_info: dict | None = None) -> dict:
    """The task score plus 0.1 x the share of plain-text characters (letters, digits,
    spaces) in the response: a dense shaping term, so that even a random model's samples
    differ in reward within a group."""
    score = float(default_compute_score(data_source, solution_str, ground_truth, extra_info))
    plain = sum(c.isalnum() or c == " " for c in solution_str) / max(len(solution_str), 1)
    return {"score": score + 0.1 * plain, "acc": score}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", default="outputs/smoke", help="where model, data and metrics go")
    parser.add_argument("--steps", type=int, default=3, help="training steps")
    parser.add_argument("--size", default="tiny", help="tiny model size (see make-tiny-model)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights, data and sampling")
    parser.add_argument("overrides", nargs="*", help="config overrides key.sub=value")


def run(args: argparse.Namespace) -> int:
    metrics = run_smoke(Path(args.out_dir), steps=args.steps, size=args.size, seed=args.seed,
                        overrides=args.overrides)
    last = metrics[-1]
    logger.info("smoke run done: %d steps, last reward %.3f, surrogate loss %.4f -> %.4f",
                len(metrics), last["reward/mean"], last["actor/pg_loss"],
                last["actor/pg_loss_after"])
    return 0


def run_smoke(out_dir: Path, steps: int = 3, size: str = "tiny", seed: int = 0,
              overrides: list[str] | tuple[str, ...] = ()) -> list[dict[str, float]]:
    """Run the smoke pipeline; return (and write) one metrics dict per step."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model_dir = out_dir / "model"
    if not (model_dir / "config.json").is_file():
        make_tiny_model(model_dir, size=size, seed=seed)
    train_path, _ = write_arithmetic_dataset(out_dir / "data", n_train=64, n_test=8, seed=seed)
    cfg = load_config(overrides=[
        f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={train_path}",
        "data.train_batch_size=4", "data.max_prompt_length=384", "data.max_response_length=24",
        f"data.seed={seed}", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.optim.lr=1e-4",
        "algorithm.adv_estimator=grpo", f"custom_reward_function.path={Path(__file__)}",
        "custom_reward_function.name=smoke_compute_score", *overrides])
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(cfg.actor_rollout_ref.model.path)
    model = AutoModelForCausalLM.from_pretrained(cfg.actor_rollout_ref.model.path)
    optim_cfg = cfg.actor_rollout_ref.actor.optim
    optimizer = torch.optim.AdamW(model.parameters(), lr=optim_cfg.lr,
                                  betas=tuple(optim_cfg.betas),
                                  weight_decay=optim_cfg.weight_decay)
    reward_fn = load_reward_manager(cfg.reward_model, cfg.custom_reward_function, tokenizer,
                                    reward_fn_key=cfg.data.reward_fn_key)
    loader = create_train_dataloader(create_rl_dataset(train_path, cfg.data, tokenizer), cfg.data)
    history: list[dict[str, float]] = []
    with (out_dir / "metrics.jsonl").open("w") as sink:
        for step, batch in enumerate(_batches(loader, steps), 1):
            started = time.perf_counter()
            data = DataProto.from_single_dict(batch)
            data.non_tensor_batch["uid"] = np.array([str(i) for i in range(len(data))],
                                                    dtype=object)
            data = data.repeat(cfg.actor_rollout_ref.rollout.n, interleave=True)
            prompts = data.pop(batch_keys=["input_ids", "attention_mask", "position_ids"])
            data = data.union(generate(model, tokenizer, prompts, cfg.actor_rollout_ref.rollout))
            scored = reward_fn(data, return_dict=True)
            data.batch["token_level_scores"] = scored["reward_tensor"]
            data.batch["token_level_rewards"] = scored["reward_tensor"]
            data = compute_advantage(data, cfg.algorithm.adv_estimator,
                                     norm_adv_by_std_in_grpo=cfg.algorithm.norm_adv_by_std_in_grpo)
            step_metrics = update_policy(model, optimizer, data, cfg.actor_rollout_ref.actor)
            step_metrics.update({
                "step": step,
                "reward/mean": data.batch["token_level_scores"].sum(-1).mean().item(),
                "reward/acc": float(np.mean(scored["reward_extra_info"]["acc"])),
                "response_length/mean": data.batch["response_mask"].sum(-1).float().mean().item(),
                "time/step_s": time.perf_counter() - started,
            })
            sink.write(json.dumps(step_metrics) + "\n")
            logger.info("step %d: %s", step, ", ".join(f"{k}={v:.4g}" for k, v in
                                                       step_metrics.items() if k != "step"))
            history.append(step_metrics)
    return history


def _batches(loader, steps: int):
    produced = 0
    while produced < steps:
        for batch in loader:
            yield batch
            produced += 1
            if produced == steps:
                return


@torch.no_grad()
def generate(model, tokenizer, data: DataProto, rollout_cfg) -> DataProto:
    """Sample one response per row: prompts (B, P), responses (B, R) right-padded, masks."""
    prompts = data.batch["input_ids"]  # (B, P) left-padded
    prompt_mask = data.batch["attention_mask"]  # (B, P)
    response_length = rollout_cfg.response_length
    pad_id = tokenizer.pad_token_id
    out = model.generate(
        input_ids=prompts, attention_mask=prompt_mask, max_new_tokens=response_length,
        do_sample=rollout_cfg.do_sample, temperature=rollout_cfg.temperature,
        top_p=rollout_cfg.top_p, top_k=rollout_cfg.top_k if rollout_cfg.top_k > 0 else None,
        pad_token_id=pad_id, eos_token_id=model.generation_config.eos_token_id)
    responses = out[:, prompts.shape[1]:]  # (B, r) with r <= R
    responses = torch.nn.functional.pad(responses, (0, response_length - responses.shape[1]),
                                        value=pad_id)  # (B, R)
    response_mask = _mask_after_eos(responses, model.generation_config.eos_token_id)  # (B, R)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)  # (B, P + R)
    position_ids = torch.clamp(attention_mask.cumsum(-1) - 1, min=0)  # (B, P + R)
    return DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "response_mask": response_mask,
        "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention_mask,
        "position_ids": position_ids})


def _mask_after_eos(responses: torch.Tensor, eos_ids: int | list[int]) -> torch.Tensor:
    """1 up to and including the first EOS of each row, 0 after it."""
    eos = torch.tensor(eos_ids if isinstance(eos_ids, list) else [eos_ids])
    is_eos = torch.isin(responses, eos).long()  # (B, R)
    eos_before = is_eos.cumsum(-1) - is_eos  # EOS tokens strictly before each position
    return (eos_before == 0).long()


def response_log_probs(model, data: DataProto) -> torch.Tensor:
    """log p(response token | prefix) for every response position: (B, R)."""
    response_length = data.batch["responses"].shape[1]
    logits = model(input_ids=data.batch["input_ids"], attention_mask=data.batch["attention_mask"],
                   position_ids=data.batch["position_ids"]).logits  # (B, P + R, V)
    logits = logits[:, -response_length - 1:-1]  # (B, R, V): position t predicts token t + 1
    return logprobs_from_logits(logits.float(), data.batch["responses"])  # (B, R)


def update_policy(model, optimizer, data: DataProto, actor_cfg) -> dict[str, float]:
    """One PPO-clip step on the whole batch; reports the surrogate loss before and after."""
    mask = data.batch["response_mask"]
    advantages = data.batch["advantages"]
    loss_fn = get_policy_loss_fn(actor_cfg.policy_loss.loss_mode)
    model.eval()  # no dropout: the old and new log-probs must come from the same function
    with torch.no_grad():
        old_log_prob = response_log_probs(model, data)
    log_prob = response_log_probs(model, data)
    loss, metrics = loss_fn(old_log_prob, log_prob, advantages, mask, actor_cfg.loss_agg_mode,
                            actor_cfg)
    optimizer.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), actor_cfg.grad_clip)
    optimizer.step()
    with torch.no_grad():
        new_log_prob = response_log_probs(model, data)
        loss_after, _ = loss_fn(old_log_prob, new_log_prob, advantages, mask,
                                actor_cfg.loss_agg_mode, actor_cfg)
        approx_kl = agg_loss(old_log_prob - new_log_prob, mask, "token-mean")
    result = {"actor/pg_loss": loss.item(), "actor/pg_loss_after": loss_after.item(),
              "actor/grad_norm": grad_norm.item(), "actor/approx_kl_after": approx_kl.item()}
    result.update({k: float(v) for k, v in metrics.items()})
    if not all(math.isfinite(v) for v in result.values()):
        raise FloatingPointError(f"non-finite metrics in the smoke update: {result}")
    return result

