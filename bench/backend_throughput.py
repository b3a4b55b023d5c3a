"""Rollout throughput of three backends on one workload: the embedded hf engine, `agentrl
serve` (the same engine behind SGLang's HTTP API) and vLLM's CPU build (`.venv-vllm`).

    python bench/backend_throughput.py [--size small] [--requests 64] [--tokens 64]
    python bench/repeat.py --runs 3 -- python bench/backend_throughput.py

Each backend runs in a fresh process of its own (bench/fresh_process.py): the same tiny
model (`--size`, untied, fp32), the same random prompts, `--requests` generations of exactly
`--tokens` sampled tokens each (`ignore_eos`), all sent at once through the backend protocol
(what the rollout engine does). Server start-up and a warm-up generation are outside the
timing. Prints one JSON line: per backend `tokens_per_s` and `seconds`, and the ratios
`serve_over_hf` and `vllm_over_hf` (> 1: faster than the embedded engine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fresh_process import in_fresh_processes, versions  # noqa: E402

BACKENDS = ("hf", "serve", "vllm")
REPO = Path(__file__).resolve().parents[1]


def _backend(kind: str, model_dir: str, tokenizer):
    from omegaconf import OmegaConf

    from agentrl.config import load_config
    from agentrl.rollout.backends.factory import create_backend, server_launcher

    python = os.environ.get("AGENTRL_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python"))
    overrides = {
        "hf": ["actor_rollout_ref.rollout.name=hf"],
        "serve": ["actor_rollout_ref.rollout.name=hf"],
        "vllm": ["actor_rollout_ref.rollout.name=vllm",
                 f"actor_rollout_ref.rollout.server_python={python}"],
    }[kind]
    cfg = load_config(overrides=[*overrides, f"actor_rollout_ref.model.path={model_dir}",
                                 "actor_rollout_ref.rollout.launch_timeout=600"])
    rollout = OmegaConf.to_container(cfg.actor_rollout_ref.rollout, resolve=True)
    if kind == "serve":  # the off-policy modes' servers: agentrl serve of the hf engine
        launcher = server_launcher(rollout, model_dir, seed=0)
        urls = launcher.start()
        from agentrl.rollout.backends.factory import backend_client

        return backend_client(rollout, urls, tokenizer, on_close=launcher.stop)
    return create_backend(rollout, model_dir, tokenizer, seed=0)


def run_one(kind: str, args: argparse.Namespace) -> dict:
    from transformers import AutoTokenizer

    from agentrl.models.tiny import make_tiny_model

    model_dir = str(make_tiny_model(tempfile.mkdtemp(), size=args.size, seed=0,
                                    tie_word_embeddings=False))  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(10, 1900) for _ in range(rng.randrange(16, 64))]
               for _ in range(args.requests)]  # fmt: skip
    params = {"max_new_tokens": args.tokens, "temperature": 1.0, "ignore_eos": True}
    backend = _backend(kind, model_dir, tokenizer)

    async def batch(tag: str, rows: list[list[int]]) -> int:
        outs = await asyncio.gather(*(backend.generate(p, dict(params), f"{tag}{i}-t0-a0")
                                      for i, p in enumerate(rows)))  # fmt: skip
        return sum(len(o.output_ids) for o in outs)

    async def main() -> tuple[int, float]:
        await batch("warm", prompts[:4])
        started = time.perf_counter()
        tokens = await batch("timed", prompts)
        seconds = time.perf_counter() - started
        closer = getattr(backend, "aclose", None)
        if closer is not None:
            await closer()
        return tokens, seconds

    tokens, seconds = asyncio.run(main())
    return {"tokens": tokens, "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="small", help="tiny model size (nano cannot be served "
                                                       "by vLLM's CPU attention)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--backend", choices=BACKENDS, help=argparse.SUPPRESS)  # a child's
    args, raw = parser.parse_known_args()
    if args.backend:
        print(json.dumps(run_one(args.backend, args)))
        return
    argv = [a for a in sys.argv[1:] if not a.startswith("--backends")]
    results = in_fresh_processes(__file__, "--backend", args.backends.split(","), argv)
    hf = results.get("hf", {}).get("tokens_per_s")
    report = {"size": args.size, "requests": args.requests, "tokens": args.tokens,
              **{k: v for k, v in results.items()}, "versions": versions()}
    for kind in ("serve", "vllm"):
        if hf and kind in results:
            report[f"{kind}_over_hf"] = round(results[kind]["tokens_per_s"] / hf, 3)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
