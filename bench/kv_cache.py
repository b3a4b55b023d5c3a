"""Generation time of the hf engine with its KV cache (``kv_cache="chunked"``: buffers
grown 128 positions at a time, agentrl/rollout/backends/kv_cache.py) against transformers'
``DynamicCache`` (``kv_cache="dynamic"``: one concatenation per layer per decode step),
each in its own fresh process.

    python bench/kv_cache.py                                # small tiny model, 64 x 1,024
    python bench/kv_cache.py --size nano --rows 8 --tokens 64   # quick check

Each process loads a tiny Qwen2 model (``--size``, random weights, built offline) into
``HFBackend`` and runs ``--generations`` identical micro-batches of ``--rows`` requests x
``--tokens`` sampled tokens (EOS ignored, so every batch is the same work). The first
generation of a process is what a trainer's first step pays; the later ones are steady.
It prints one JSON line: ``first_ratio`` (first generation over the steady median, chunked
cache; issue 27's target for a whole step is <= 1.3), ``dynamic_first_ratio``,
``steady_time_ratio`` and ``first_time_ratio`` (chunked over dynamic), ``peak_ratio``
(peak resident memory, chunked over dynamic), and each path's seconds. Run it alone on the
machine: timings taken beside another job are wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from fresh_process import in_fresh_processes, versions

from agentrl.rollout.backends.base import KV_CACHES


def run_cache(cache: str, args: argparse.Namespace) -> dict:
    """One cache's numbers, in this process."""
    import torch
    from engine_timing import random_prompts, time_generations

    from agentrl.models.tiny import make_tiny_model
    from agentrl.rollout.backends.hf import HFBackend
    from agentrl.rollout.backends.kv_cache import make_kv_cache
    from agentrl.utils.memory import peak_rss_bytes

    torch.set_num_threads(args.threads)
    model_dir = make_tiny_model(tempfile.mkdtemp(prefix="bench-kv-"), size=args.size, seed=0)
    backend = HFBackend.from_pretrained(model_dir, max_num_seqs=args.rows, seed=args.seed,
                                        kv_cache=cache)
    prompts = random_prompts(args.rows, backend.vocab_size, args.seed)
    params = {"temperature": 1.0, "max_new_tokens": args.tokens, "ignore_eos": True}
    outputs, timing = time_generations(backend, prompts, params, args.generations)
    return {
        "cache": cache,
        "kv_layer": type(make_kv_cache(backend.model.config, cache).layers[0]).__name__,
        **timing,
        "tokens_per_generation": sum(len(o.output_ids) for o in outputs),
        "peak_rss_gb": peak_rss_bytes() / 2**30,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="small", help="agentrl.models.tiny size")
    parser.add_argument("--rows", type=int, default=64, help="requests per micro-batch")
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per request")
    parser.add_argument("--generations", type=int, default=3, help=">= 2: first + steady")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", choices=KV_CACHES, help=argparse.SUPPRESS)  # a child's cache
    args = parser.parse_args(argv)
    if args.generations < 2:
        parser.error(f"--generations must be >= 2 (a first and a steady one), got {args.generations}")
    if args.cache:
        print(json.dumps(run_cache(args.cache, args)))
        return 0
    raw = sys.argv[1:] if argv is None else argv
    results = in_fresh_processes(__file__, "--cache", KV_CACHES, raw)
    new, old = results["chunked"], results["dynamic"]
    report = {
        "first_ratio": round(new["first_ratio"], 4),
        "dynamic_first_ratio": round(old["first_ratio"], 4),
        "steady_time_ratio": round(new["steady_s"] / old["steady_s"], 4),
        "first_time_ratio": round(new["first_s"] / old["first_s"], 4),
        "peak_ratio": round(new["peak_rss_gb"] / old["peak_rss_gb"], 4),
        "chunked": new,
        "dynamic": old,
        "settings": {k: getattr(args, k) for k in ("size", "rows", "tokens", "generations",
                                                   "threads", "seed")},
        "versions": versions(),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
