"""Peak memory and time of one actor update and one log-prob pass: the chunked output
layer (``agentrl.workers.forward.response_log_probs``) against the full-logits path it
replaced (``full_logits_log_probs``, kept as the fallback and the reference).

    python bench/update_memory.py                          # Qwen2.5's vocabulary, 8 x 1,024
    python bench/update_memory.py --rows 2 --length 256    # quick check

The model has Qwen2.5's 151,936-token vocabulary and a small body (hidden 64, 2 layers,
random weights), so the output layer dominates as it does in a real update. A micro-batch
of ``--rows`` sequences of ``--length`` tokens (a quarter prompt, the rest response, one
tool-response span masked out of the loss). One update is what the actor does per
micro-batch: log-probs with the entropy as a metric, the clipped policy loss, backward,
one AdamW step; one log-prob pass is the old/reference log-prob forward (no gradient).

Each path runs in its own fresh process (peak resident memory only grows within a
process): after one warm-up update it times ``--repeats`` updates and log-prob passes
(medians) and reports the process's peak RSS. It prints one JSON line: ``peak_ratio`` and
``time_ratio`` (new over old; time of the update), ``logprob_time_ratio``, and each path's
numbers. Targets (issue 27): peak_ratio <= 0.3, time_ratio <= 1.0. Run it alone on the
machine: timings taken beside another job are wrong.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from fresh_process import in_fresh_processes, versions

PATHS = ("new", "old")


def _peak_rss_gb() -> float:
    # VmHWM, this address space's peak: ru_maxrss survives execve on Linux, so a child of a
    # big process (the test suite's) would start at its parent's peak and both paths tie
    from agentrl.utils.memory import peak_rss_bytes

    return peak_rss_bytes() / 2**30


def _model(vocab: int, hidden: int, layers: int, seed: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    return Qwen2ForCausalLM(config)


def run_path(path: str, args: argparse.Namespace) -> dict:
    """One path's numbers, in this process."""
    import torch

    from agentrl.algos import get_policy_loss_fn
    from agentrl.testing.workers import make_trajectory_batch
    from agentrl.workers.forward import full_logits_log_probs, response_log_probs

    torch.set_num_threads(args.threads)
    forward = response_log_probs if path == "new" else full_logits_log_probs
    model = _model(args.vocab, args.hidden, args.layers, args.seed)
    prompt = args.length // 4
    data = make_trajectory_batch(
        args.rows,
        prompt,
        args.length - prompt,
        args.vocab,
        seed=args.seed,
        min_prompt_fraction=1.0,
        min_response_fraction=1.0,
    )
    batch = data.batch
    mask = batch["response_mask"].float()
    with torch.no_grad():
        old_log_probs, _ = forward(model, batch)
    advantages = torch.randn(mask.shape, generator=torch.Generator().manual_seed(args.seed))
    loss_fn = get_policy_loss_fn("vanilla")
    loss_cfg = {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    baseline_gb = _peak_rss_gb()

    def update() -> float:
        start = time.perf_counter()
        model.train()
        log_probs, entropy = forward(model, batch, entropy=True)
        loss, _ = loss_fn(old_log_probs, log_probs, advantages, mask, "token-mean", loss_cfg)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        assert entropy is not None and torch.isfinite(loss)
        return time.perf_counter() - start

    def log_prob_pass() -> float:
        start = time.perf_counter()
        model.eval()
        with torch.no_grad():
            forward(model, batch)
        return time.perf_counter() - start

    update()  # warm-up: the optimizer's state, first-call costs
    update_s = [update() for _ in range(args.repeats)]
    log_prob_s = [log_prob_pass() for _ in range(args.repeats)]
    return {
        "path": path,
        "update_s": statistics.median(update_s),
        "update_s_range": [min(update_s), max(update_s)],
        "log_prob_s": statistics.median(log_prob_s),
        "log_prob_s_range": [min(log_prob_s), max(log_prob_s)],
        "peak_rss_gb": _peak_rss_gb(),
        "rss_before_update_gb": baseline_gb,
        "tokens": int(batch["attention_mask"].sum()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8, help="sequences per micro-batch")
    parser.add_argument("--length", type=int, default=1024, help="tokens per sequence")
    parser.add_argument("--vocab", type=int, default=151_936, help="vocabulary (Qwen2.5's)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="timed updates per path")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--path", choices=PATHS, help=argparse.SUPPRESS)  # a child's path
    args = parser.parse_args(argv)
    if args.path:
        print(json.dumps(run_path(args.path, args)))
        return 0
    raw = sys.argv[1:] if argv is None else argv
    results = in_fresh_processes(__file__, "--path", PATHS, raw)
    new, old = results["new"], results["old"]
    report = {
        "peak_ratio": round(new["peak_rss_gb"] / old["peak_rss_gb"], 4),
        "time_ratio": round(new["update_s"] / old["update_s"], 4),
        "logprob_time_ratio": round(new["log_prob_s"] / old["log_prob_s"], 4),
        "new": new,
        "old": old,
        "settings": {
            k: getattr(args, k)
            for k in ("rows", "length", "vocab", "hidden", "layers", "repeats", "threads")
        },
        "versions": versions(),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
