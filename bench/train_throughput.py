"""Actor update throughput: micro-batches by token budget vs by count, on a multi-turn batch.

    python bench/train_throughput.py                         # small model, 32 trajectories
    python bench/train_throughput.py --size tiny --batch 16 --steps 1   # quick check

It builds a tiny Qwen2 model offline and a batch shaped like multi-turn rollouts: prompts
of half to full ``--prompt-length``, responses of a quarter to all of ``--response-length``
(a 4x length spread) with tool-output spans masked out of the loss. Then it times
``update_actor`` of an ``ActorRolloutRefWorker`` (one process, FSDP2 over a group of one)
twice over the same batch:

- by count: ``ppo_micro_batch_size_per_gpu=--micro`` rows per pass, each pass as long as
  its longest row;
- by token budget: ``use_dynamic_bsz`` with ``ppo_max_token_len_per_gpu = --micro x
  (prompt + response length)``, the memory a count micro-batch of full-length rows takes;
  rows of similar length share a pass.

Throughput is valid tokens (prompt + response) per second of ``update_actor``; both runs
do the same optimizer steps on the same rows. It prints both and their ratio.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from agentrl.distributed import InProcessWorkerGroup, WorkerSpec
from agentrl.models.tiny import make_tiny_model
from agentrl.protocol import DataProto
from agentrl.testing.workers import make_trajectory_batch, tiny_worker_config
from agentrl.workers import ActorRolloutRefWorker
from agentrl.workers.micro_batch import MicroBatching, padded_tokens, plan_micro_batches


def tokens_per_second(
    model_dir: Path, data: DataProto, overrides: list[str], steps: int
) -> tuple[float, float]:
    """(valid tokens/s, seconds per update_actor) over ``steps`` timed calls after a warmup."""
    cfg = tiny_worker_config(model_dir, overrides)
    with InProcessWorkerGroup(
        WorkerSpec(ActorRolloutRefWorker, cfg.actor_rollout_ref, role="actor")
    ) as group:
        group.init_model()
        data = data.select(deepcopy=True).union(group.compute_log_prob(data))
        group.update_actor(data)  # warmup: allocator, kernels
        started = time.perf_counter()
        for _ in range(steps):
            group.update_actor(data)
        elapsed = (time.perf_counter() - started) / steps
    return float(data.batch["attention_mask"].sum()) / elapsed, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", help="tiny model size (tiny|small|medium)")
    parser.add_argument("--batch", type=int, default=32, help="trajectories in the batch")
    parser.add_argument("--prompt-length", type=int, default=64)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--micro", type=int, default=4, help="rows per count micro-batch")
    parser.add_argument("--steps", type=int, default=2, help="timed update_actor calls")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="agentrl_bench_"))
    model_dir = make_tiny_model(work / "model", size=args.size, seed=0)
    P, R = args.prompt_length, args.response_length
    data = make_trajectory_batch(
        args.batch, P, R, vocab_size=1900, seed=0, min_response_fraction=0.25
    )
    common = [
        f"data.max_prompt_length={P}",
        f"data.max_response_length={R}",
        f"data.train_batch_size={args.batch}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
    ]
    budget = args.micro * (P + R)
    count_overrides = [
        *common,
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro}",
    ]
    budget_overrides = [
        *common,
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={budget}",
    ]

    by_count = plan_micro_batches(data, MicroBatching(micro_batch_size=args.micro))
    by_budget = plan_micro_batches(data, MicroBatching(use_dynamic_bsz=True, max_token_len=budget))
    valid = int(data.batch["attention_mask"].sum())
    print(
        f"batch: {args.batch} trajectories, {valid} valid tokens of {args.batch * (P + R)} "
        f"padded ({args.size} model)"
    )
    for name, groups, overrides in (
        ("by count", by_count, count_overrides),
        ("by token budget", by_budget, budget_overrides),
    ):
        computed = padded_tokens(data, groups)
        rate, seconds = tokens_per_second(model_dir, data, overrides, args.steps)
        print(
            f"{name:>16}: {len(groups):3d} micro-batches, {computed:7d} tokens computed, "
            f"{seconds:6.2f} s/update, {rate:9.0f} tokens/s"
        )
        if name == "by count":
            count_rate = rate
    print(f"ratio (token budget / count): {rate / count_rate:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
