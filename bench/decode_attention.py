"""Decode time of the hf engine on a grouped-query model: the packed decode attention
(agentrl/rollout/backends/decode_attention.py: a group's query heads attend to their
key/value head, no copies) against transformers' own SDPA path, each in a fresh process.

    python bench/decode_attention.py                              # 32 x 256 greedy tokens
    python bench/decode_attention.py --rows 8 --tokens 32         # quick check

The model is a Qwen2 built from a config with Qwen2.5-0.5B's attention layout (14 query
heads, 2 key/value heads, head dim 64) and a small body (``--layers``, ``--intermediate``),
random weights, agentrl's tiny tokenizer; bf16 on a GPU, fp32 on the CPU. Each process
runs ``--generations`` identical greedy micro-batches of ``--rows`` requests x ``--tokens``
tokens (EOS ignored; bench/engine_timing.py). On transformers releases whose SDPA path
repeats keys and values per query head during decode (4.57, 5.17 and 5.20 read; 5.24
packs itself) the reference pays for the copies; on 5.24 both
paths should take the same time. It prints one JSON line: ``time_ratio`` (packed over
transformers' path, steady medians), ``same_tokens`` (the greedy tokens are identical), each
path's seconds and the versions. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys

from fresh_process import in_fresh_processes, versions

PATHS = ("packed", "transformers")


def run_path(path: str, args: argparse.Namespace) -> dict:
    """One attention path's numbers, in this process."""
    import torch
    from engine_timing import random_prompts, time_generations
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentrl.models.tiny import train_tiny_tokenizer
    from agentrl.rollout.backends.hf import HFBackend

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tokenizer = train_tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=-(-len(tokenizer) // 64) * 64, hidden_size=args.heads * args.head_dim,
        intermediate_size=args.intermediate, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=4096, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    config._attn_implementation = "sdpa"
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = Qwen2ForCausalLM(config).eval().to(device=device, dtype=dtype)
    backend = HFBackend(model, tokenizer, max_num_seqs=args.rows, seed=args.seed)
    if path == "transformers":
        model.set_attn_implementation("sdpa")
    prompts = random_prompts(args.rows, len(tokenizer), args.seed)
    params = {"temperature": 0.0, "max_new_tokens": args.tokens, "ignore_eos": True}
    outputs, timing = time_generations(backend, prompts, params, args.generations)
    return {
        "path": path,
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "dtype": str(dtype).removeprefix("torch."),
        "attn_implementation": model.config._attn_implementation,
        **timing,
        "tokens": [o.output_ids for o in outputs],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=32, help="requests per micro-batch")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per request")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=14, help="query heads")
    parser.add_argument("--kv-heads", type=int, default=2, help="key/value heads")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--intermediate", type=int, default=1024, help="MLP width")
    parser.add_argument("--generations", type=int, default=3, help=">= 2: first + steady")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--device", help="default: cuda if available (bf16), else cpu (fp32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--path", choices=PATHS, help=argparse.SUPPRESS)  # a child's path
    args = parser.parse_args(argv)
    if args.generations < 2:
        parser.error(f"--generations must be >= 2 (a first and a steady one), got {args.generations}")
    if args.heads % args.kv_heads:
        parser.error(f"--heads ({args.heads}) must be a multiple of --kv-heads ({args.kv_heads})")
    if args.path:
        print(json.dumps(run_path(args.path, args)))
        return 0
    raw = sys.argv[1:] if argv is None else argv
    results = in_fresh_processes(__file__, "--path", PATHS, raw)
    new, old = results["packed"], results["transformers"]
    report = {
        "time_ratio": round(new["steady_s"] / old["steady_s"], 4),
        "same_tokens": new.pop("tokens") == old.pop("tokens"),
        "packed": new,
        "transformers": old,
        "settings": {k: getattr(args, k) for k in ("rows", "tokens", "layers", "heads",
                                                   "kv_heads", "head_dim", "intermediate",
                                                   "generations", "threads", "seed")},
        "versions": versions(),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
