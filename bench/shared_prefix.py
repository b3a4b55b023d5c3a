"""Shared prefixes computed once (``actor.shared_prefix``, agentrl/workers/prefix_tree.py)
against the flat pass: tokens computed and the time of one actor micro-batch step.

    python bench/shared_prefix.py                          # small tiny model, group of 8
    python bench/shared_prefix.py --size nano --response 8 --repeats 1   # quick check

Two workloads, each one micro-batch: a GRPO group of ``--group`` rows whose prompt is
``--prompt-factor`` x its responses (``--response`` tokens, lengths between half and all of
it), and an agent session forked ``--segments - 1`` times (each segment's prompt is its
parent's history to a branch point inside the parent's response plus an edited turn;
agentrl.testing.workers.forked_session_rows). A step is what the actor's update does to a
micro-batch: response log-probs and entropy, a loss, its backward. Each step is timed
``--repeats`` times per path, the two paths alternating, after one warm-up each; the
median is reported.

It prints one JSON line; per workload: ``flat_positions`` and ``shared_positions`` (the
positions the passes compute, padding included: flat is rows x the trimmed width, the tree
the sum of its levels' rows x widths), ``tokens_ratio`` (shared over flat; issue 54's
target <= 0.5), ``step_s_flat``, ``step_s_shared``, ``time_ratio`` (target <= 0.7),
``cpu_s_flat``, ``cpu_s_shared`` and ``cpu_ratio`` (the process's CPU seconds, all threads:
a hint on a busy machine, not the target), ``levels`` and ``max_abs_diff`` (the largest
log-prob difference between the paths). Run it alone on the machine: timings taken beside
another job are wrong.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time


def step_time(model, batch, shared: bool) -> tuple[float, float, object]:
    """One forward + backward of a micro-batch; (wall seconds, CPU seconds, log-probs)."""
    from agentrl.workers.forward import response_log_probs

    model.zero_grad(set_to_none=True)
    started, cpu_started = time.perf_counter(), time.process_time()
    log_probs, entropy = response_log_probs(
        model, batch, entropy=True, entropy_grad=True, shared_prefix=shared
    )
    mask = batch["attention_mask"][:, -log_probs.shape[1] :]
    ((log_probs + 0.01 * entropy) * mask).sum().backward()
    return time.perf_counter() - started, time.process_time() - cpu_started, log_probs.detach()


def measure(model, rows: list, repeats: int) -> dict:
    """Tokens and median step times of both paths on one micro-batch of ``rows``."""
    from agentrl.testing.workers import batch_from_rows
    from agentrl.workers.micro_batch import padded_tokens
    from agentrl.workers.prefix_tree import plan_prefix_tree

    data = batch_from_rows(rows)
    batch = data.batch
    plan = plan_prefix_tree(batch)
    if plan is None:
        raise SystemExit("the workload shares no prefix worth a tree; use longer prompts")
    flat_positions = padded_tokens(data, [list(range(len(data)))])
    shared_positions = sum(level.input_ids.numel() for level in plan.levels)
    times: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    outputs = {}
    for shared in (False, True):  # warm-up
        *_, outputs[shared] = step_time(model, batch, shared)
    for _ in range(repeats):
        for shared in (False, True):
            seconds, cpu_seconds, _ = step_time(model, batch, shared)
            times[shared].append(seconds)
            cpu[shared].append(cpu_seconds)
    flat_s, shared_s = statistics.median(times[False]), statistics.median(times[True])
    flat_cpu, shared_cpu = statistics.median(cpu[False]), statistics.median(cpu[True])
    return {
        "rows": len(rows),
        "levels": len(plan.levels),
        "valid_tokens": int(batch["attention_mask"].sum()),
        "flat_positions": flat_positions,
        "shared_positions": shared_positions,
        "tokens_ratio": shared_positions / flat_positions,
        "step_s_flat": flat_s,
        "step_s_shared": shared_s,
        "time_ratio": shared_s / flat_s,
        "cpu_s_flat": flat_cpu,
        "cpu_s_shared": shared_cpu,
        "cpu_ratio": shared_cpu / flat_cpu,
        "max_abs_diff": float((outputs[True] - outputs[False]).abs().max()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="small", help="agentrl.models.tiny size")
    parser.add_argument("--group", type=int, default=8, help="rows of the GRPO group")
    parser.add_argument("--response", type=int, default=64, help="response tokens per row")
    parser.add_argument("--prompt-factor", type=int, default=10, help="prompt = this x response")
    parser.add_argument("--segments", type=int, default=4, help="segments of the forked session")
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per path (median)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from agentrl.models.tiny import make_tiny_model
    from agentrl.testing.workers import forked_session_rows, grpo_group_rows

    torch.set_num_threads(args.threads)
    model_dir = make_tiny_model(tempfile.mkdtemp(prefix="bench-prefix-"), size=args.size,
                                seed=args.seed)  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(model_dir).train()
    vocab = model.config.vocab_size
    prompt = args.prompt_factor * args.response
    workloads = {
        "grpo_group": grpo_group_rows(args.group, prompt, args.response, vocab, args.seed),
        "forked_session": forked_session_rows(args.segments, prompt, args.response, vocab,
                                              args.seed),  # fmt: skip
    }
    result = {name: measure(model, rows, args.repeats) for name, rows in workloads.items()}
    result.update(size=args.size, group=args.group, response=args.response, prompt=prompt,
                  segments=args.segments, repeats=args.repeats, threads=args.threads,
                  torch=torch.__version__)  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
