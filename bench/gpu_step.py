"""GRPO steps on a GPU: time per stage, peak memory with and without offload, the update's
MFU, weight-sync time per GB and the rollout/trainer log-prob gap. Prints one JSON line.

    python bench/gpu_step.py                          # Qwen2.5-0.5B-shaped, random weights
    python bench/gpu_step.py --shape tiny --prompts 4 --n 2 --response-length 32   # CPU check

It builds a model from Qwen2.5-0.5B's config (random weights: nothing is downloaded; the
tokenizer is agentrl's tiny BPE, the embedding keeps Qwen2.5's 151,936 rows), writes a
verl-format parquet of random prompts, and runs ``PPOTrainer.train_step`` (the trainer's
own step: hf rollout -> reward -> old log-probs -> ref log-probs -> GRPO advantages ->
update -> weight sync) in the in-process worker group, twice over:

- ``resident``: everything stays on the GPU (``free_cache_engine=false``, no offload);
- ``offload``: the engine releases its weights after generation, the actor's parameters
  and optimizer state and the reference's parameters live on the CPU between uses
  (``fsdp_config.param_offload`` / ``optimizer_offload``).

Each config runs ``--warmup`` steps, then ``--steps`` timed ones; the warm-up steps count
only in ``first_step_s`` / ``first_step_ratio`` (the first step over the timed steps' mean)
and the per-step lists ``step_s_per_step`` and ``generate_s_per_step``. Responses ignore EOS, so
every trajectory is ``--response-length`` tokens and steps are comparable. ``--kv-cache
dynamic`` runs the hf engine with transformers' ``DynamicCache`` instead of its own chunked
one (``rollout.engine_kwargs.kv_cache``; bench/kv_cache.py), to compare first steps on the
same machine.

Every stage also records ``gpu_util`` (NVML's utilisation, the share of time a kernel ran,
sampled every 50 ms; the summary's ``gpu_util_pct`` per stage and
``generate_gpu_util_per_step``): a stage far below 100% is bound by the host, not the GPU.
``--profile`` adds one more step, not timed, with the old log-probs and the update under
``torch.profiler``; the summary's ``profile`` gives, per stage, the device's busy seconds
and the operators with the most self time (bench/stage_profile.py).

**MFU method.** Model FLOPs of the update (no recompute counted: activation checkpointing's
extra forward is overhead, not model FLOPs) = ``ppo_epochs x sum over trajectories of
3 x (2 N T + 2 L d T (T + 1))``: ``N`` the parameters used in matrix products (every
Linear weight and the LM head; the embedding lookup is not a product), ``T`` the
trajectory's valid tokens (prompt + response), ``L`` layers, ``d`` heads x head dim; the
``2 L d T (T + 1)`` term is causal attention (QK^T and AV); x3 for forward + backward.
MFU = FLOPs / ``timing/update_actor_s`` / the GPU's dense bf16 peak (``--peak-tflops``,
default from the device name: H100/H200 989, A100 312). Weight sync: ``timing/weight_sync_s``
over the gathered bytes (the fp32 master weights, tied weights once).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import torch
from stage_profile import UtilizationSampler, profile_summary

from agentrl.rollout.backends.base import KV_CACHES

# Qwen2.5-0.5B's config.json (the shape; weights are random).
QWEN25_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "A100": 312.0, "A800": 312.0,
                    "L40S": 362.0, "A10G": 125.0}
CONFIGS = {
    "resident": [
        "actor_rollout_ref.rollout.free_cache_engine=false",
    ],
    "offload": [
        "actor_rollout_ref.rollout.free_cache_engine=true",
        "actor_rollout_ref.actor.fsdp_config.param_offload=true",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
        "actor_rollout_ref.ref.fsdp_config.param_offload=true",
    ],
}
logger = logging.getLogger("bench.gpu_step")


def crc_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None):
    """A reward that varies within each GRPO group (random weights solve nothing)."""
    return float(zlib.crc32(solution_str.encode()) % 2)


def build_model(out: Path, shape: str, seed: int) -> Path:
    """A Qwen2 directory: Qwen2.5-0.5B's shape (``qwen2.5-0.5b``) or a tiny one."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentrl.models.tiny import IM_END, PAD_TOKEN, make_tiny_model, train_tiny_tokenizer

    if shape != "qwen2.5-0.5b":
        return make_tiny_model(out, size=shape, seed=seed)
    tokenizer = train_tiny_tokenizer()
    pad, eos = tokenizer.convert_tokens_to_ids(PAD_TOKEN), tokenizer.convert_tokens_to_ids(IM_END)
    config = Qwen2Config(**QWEN25_05B, bos_token_id=pad, pad_token_id=pad, eos_token_id=eos)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def write_prompts(path: Path, n: int, words: int, seed: int) -> Path:
    """``n`` verl-format rows whose user message is ``words`` random words."""
    import pandas as pd

    rng = random.Random(seed)
    vocab = "the of and to in is it that for you was with on as have be at one this".split()
    rows = [
        {
            "data_source": "bench/random",
            "prompt": [{"role": "user", "content": " ".join(rng.choice(vocab) for _ in range(words))}],
            "ability": "bench",
            "reward_model": {"style": "rule", "ground_truth": "0"},
            "extra_info": {"index": i, "split": "train"},
        }
        for i in range(n)
    ]
    pd.DataFrame(rows).to_parquet(path)
    return path


def matmul_params(model: torch.nn.Module) -> int:
    """Parameters used in matrix products: every Linear weight (the LM head included)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def update_flops(data: Any, n_matmul: int, layers: int, attn_dim: int, epochs: int) -> float:
    """Model FLOPs of ``epochs`` forward+backward passes over the batch (module docstring)."""
    lengths = data.batch["attention_mask"].sum(-1).double()  # (B,) valid tokens
    per_row = 3.0 * (2.0 * n_matmul * lengths + 2.0 * layers * attn_dim * lengths * (lengths + 1))
    return float(per_row.sum()) * epochs


class StageProbe:
    """Wraps the worker group's methods: per-stage seconds, peak GPU memory and mean GPU
    utilisation (NVML), and the batch the update saw (for its FLOPs). With ``profiling``
    set, the ``PROFILED`` stages also run under ``torch.profiler`` (bench/stage_profile.py)
    and their records gain ``profile``."""

    STAGES = ("generate_sequences", "compute_log_prob", "compute_ref_log_prob", "update_actor")
    PROFILED = ("compute_log_prob", "update_actor")

    def __init__(self, group: Any, cuda: bool) -> None:
        self.cuda = cuda
        self.profiling = False
        self.records: dict[str, dict[str, Any]] = {}
        self.update_batch: Any = None
        for name in self.STAGES:
            setattr(group, name, self._wrap(name, getattr(group, name)))

    def _wrap(self, name: str, method: Any) -> Any:
        def probed(data: Any, *args: Any, **kwargs: Any) -> Any:
            if name == "update_actor":
                self.update_batch = data
            if self.cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            profiler = self._profiler() if self.profiling and name in self.PROFILED else None
            with UtilizationSampler() as utilization, profiler or contextlib.nullcontext():
                started = time.perf_counter()
                out = method(data, *args, **kwargs)
                if self.cuda:
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - started
            record: dict[str, Any] = {"s": seconds}
            if self.cuda:
                record["allocated_before_gib"] = before / 2**30
                record["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
                record["gpu_util"] = utilization.summary()
            if profiler is not None:
                record["profile"] = profile_summary(profiler, seconds)
            self.records[name] = record
            return out

        return probed

    def _profiler(self) -> Any:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        return torch.profiler.profile(activities=activities)


def run_config(name: str, args: argparse.Namespace, model_dir: Path, data: Path, out: Path) -> dict:
    from agentrl.config import load_config
    from agentrl.trainer.ppo_trainer import PPOTrainer

    n_traj = args.prompts * args.n
    unprofiled = args.warmup + args.steps  # then, with --profile, one step under the profiler
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={data}",
        "data.val_files=null",
        f"data.train_batch_size={args.prompts}",
        f"data.max_prompt_length={args.prompt_length}",
        f"data.max_response_length={args.response_length}",
        f"algorithm.adv_estimator={args.estimator}",
        f"actor_rollout_ref.rollout.n={args.n}",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.ignore_eos=true",
        # the separate old-log-prob pass, as the recorded figures and the targets (issue
        # 27) had it: the update's time and FLOPs (MFU) are then the update's alone
        "actor_rollout_ref.actor.fuse_old_log_prob=false",
        f"+actor_rollout_ref.rollout.engine_kwargs.kv_cache={args.kv_cache}",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        f"actor_rollout_ref.rollout.max_num_seqs={n_traj}",
        f"actor_rollout_ref.rollout.update_weights_bucket_megabytes={args.bucket_mb}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts // 2}",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={args.token_budget}",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={str(args.checkpointing).lower()}",
        "custom_reward_function.path=" + str(Path(__file__).resolve()),
        "custom_reward_function.name=crc_score",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.worker_group=in_process",
        f"trainer.total_training_steps={unprofiled + int(args.profile)}",
        "trainer.logger=[]",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        f"trainer.default_local_dir={out / name}",
        *CONFIGS[name],
    ]
    if args.estimator == "gae":  # PPO: a critic of the same shape, trained like the actor
        overrides += [
            f"critic.ppo_mini_batch_size={args.prompts // 2}",
            "critic.use_dynamic_bsz=true",
            f"critic.ppo_max_token_len_per_gpu={args.token_budget}",
            f"critic.forward_max_token_len_per_gpu={args.token_budget}",
            f"critic.model.enable_gradient_checkpointing={str(args.checkpointing).lower()}",
            "critic.optim.lr=1e-6",
        ]
        if name == "offload":
            overrides += ["critic.model.fsdp_config.param_offload=true",
                          "critic.model.fsdp_config.optimizer_offload=true"]
    cfg = load_config(overrides=overrides)
    cuda = torch.cuda.is_available()
    steps: list[dict] = []
    warmup: list[dict] = []  # the warm-up steps: only their times are reported (first_steps)
    with PPOTrainer(cfg) as trainer:
        trainer.init_workers()
        worker = trainer.group.worker("actor_rollout")
        model = worker.actor.model
        hf_config = model.config
        n_matmul = matmul_params(model)
        layers = int(hf_config.num_hidden_layers)
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
        attn_dim = int(hf_config.num_attention_heads) * int(head_dim)
        sync_bytes = sum(
            t.numel() * t.element_size()
            for t in {id(p): p for p in model.state_dict(keep_vars=True).values()}.values()
        )
        probe = StageProbe(trainer.actor_rollout_wg, cuda)
        batches = trainer.batches()
        profiled: list[dict] = []  # --profile: one more step, under the profiler, not timed
        for step in range(unprofiled + int(args.profile)):
            probe.profiling = step >= unprofiled
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            trainer.global_steps += 1  # as fit() does: steps count from 1
            stats = worker.rollout.backend.stats
            before = (stats.num_batches, stats.decode_steps, stats.generated_tokens)
            metrics = trainer.train_step(next(batches))
            engine = {
                "kv_cache": worker.rollout.backend.kv_cache,  # what the engine really used
                "attention": worker.rollout.backend.model.config._attn_implementation,
                "batches": stats.num_batches - before[0],
                "batch_sizes": stats.batch_sizes[before[0]:],
                "decode_steps": stats.decode_steps - before[1],
                "generated_tokens": stats.generated_tokens - before[2],
            }
            flops = update_flops(probe.update_batch, n_matmul, layers, attn_dim,
                                 int(cfg.actor_rollout_ref.actor.ppo_epochs))
            record = {
                "step_s": metrics["timing_s/step"],
                "stages": {k: dict(v) for k, v in probe.records.items()},
                "update_actor_s": metrics["timing/update_actor_s"],
                "weight_sync_s": metrics["timing/weight_sync_s"],
                "update_tflops": flops / 1e12,
                "rollout_log_probs_diff_max": metrics.get("training/rollout_log_probs_diff_max"),
                "rollout_log_probs_diff_mean": metrics.get("training/rollout_log_probs_diff_mean"),
                "rollout_probs_diff_max": metrics.get("training/rollout_probs_diff_max"),
                "pg_loss": metrics.get("actor/pg_loss"),
                "grad_norm": metrics.get("actor/grad_norm"),
                "tokens": metrics["perf/total_num_tokens"],
                "engine": engine,
                "timing": {k: v for k, v in metrics.items() if k.startswith("timing_s/")},
            }
            logger.info("%s step %d: %.1f s (%s); engine %s", name, step, record["step_s"],
                        ", ".join(f"{k} {v['s']:.1f}" for k, v in probe.records.items()),
                        json.dumps({k: v for k, v in engine.items() if k != "batch_sizes"})
                        + f" batch sizes {engine['batch_sizes'][:8]}")
            if probe.profiling:
                profiled.append(record)
            else:
                (steps if step >= args.warmup else warmup).append(record)
        resume = check_resume(trainer, batches) if args.check_resume else None
    summary = summarise(name, steps, sync_bytes, n_matmul, args)
    summary |= first_steps(warmup + steps, steps)
    if profiled:
        summary["profile"] = {
            "step_s": profiled[0]["step_s"],
            "stages": {st: r["profile"] for st, r in profiled[0]["stages"].items() if "profile" in r},
        }
    if resume is not None:
        summary["resume"] = resume
    return summary


def check_resume(trainer: Any, batches: Any) -> dict[str, Any]:
    """Save a checkpoint, train one more step, load it back: the actor's weights must be
    the saved ones bit for bit, and the rollout engine's must follow (the load syncs it)."""
    wg = trainer.actor_rollout_wg
    started = time.perf_counter()
    path = trainer.save_checkpoint()
    save_s = time.perf_counter() - started
    saved = wg.full_state_dict()[0]
    trainer.global_steps += 1
    trainer.train_step(next(batches))
    moved = wg.full_state_dict()[0]
    started = time.perf_counter()
    wg.load_checkpoint(str(path.resolve() / "actor"))
    load_s = time.perf_counter() - started
    loaded = wg.full_state_dict()[0]
    engine = trainer.group.worker("actor_rollout").rollout.backend.model.state_dict()
    return {
        "save_s": save_s,
        "load_s": load_s,
        "step_changed_weights": any(not torch.equal(saved[k], moved[k]) for k in saved),
        "actor_exact": all(torch.equal(saved[k], loaded[k]) for k in saved),
        "engine_follows": all(
            torch.equal(engine[k].cpu(), loaded[k].to(engine[k].dtype)) for k in loaded
        ),
    }


def first_steps(every: list[dict], steady: list[dict]) -> dict[str, Any]:
    """How the first step compares with the steady ones (issue 27's target: at most 1.3x):
    ``first_step_s``, ``first_step_ratio`` (first over the timed steps' mean),
    ``step_s_per_step`` and ``generate_s_per_step`` for every step, warm-up ones included."""
    steady_s = statistics.fmean(s["step_s"] for s in steady)
    return {
        "first_step_s": every[0]["step_s"],
        "first_step_ratio": every[0]["step_s"] / steady_s,
        "step_s_per_step": [s["step_s"] for s in every],
        "generate_s_per_step": [s["stages"]["generate_sequences"]["s"] for s in every],
        "generate_gpu_util_per_step": [
            (s["stages"]["generate_sequences"].get("gpu_util") or {}).get("mean_pct") for s in every
        ],
    }


def summarise(name: str, steps: list[dict], sync_bytes: int, n_matmul: int,
              args: argparse.Namespace) -> dict:
    def mean(key: str) -> float:
        return statistics.fmean(s[key] for s in steps)

    def stage_mean(stage: str, key: str) -> float:
        return statistics.fmean(s["stages"][stage][key] for s in steps)

    update_s = mean("update_actor_s")
    tflops = mean("update_tflops")
    peak = args.peak_tflops  # TFLOP/s
    out = {
        "step_s": mean("step_s"),
        "stage_s": {st: stage_mean(st, "s") for st in steps[0]["stages"]},
        "update_actor_s": update_s,
        "weight_sync_s": mean("weight_sync_s"),
        "weight_sync_s_per_gb": mean("weight_sync_s") / (sync_bytes / 1e9),
        "sync_gb": sync_bytes / 1e9,
        "update_tflops_per_s": tflops / update_s,
        "update_mfu": (tflops / update_s) / peak if peak else None,  # both in TFLOP/s
        "matmul_params": n_matmul,
        "tokens_per_step": mean("tokens"),
        "rollout_log_probs_diff_max": max(s["rollout_log_probs_diff_max"] or 0.0 for s in steps),
        "rollout_log_probs_diff_mean": mean("rollout_log_probs_diff_mean"),
        "rollout_probs_diff_max": max(s["rollout_probs_diff_max"] or 0.0 for s in steps),
        "grad_norm": [s["grad_norm"] for s in steps],
        "engine": [s["engine"] for s in steps],
        "timing_s": {k: statistics.fmean(s["timing"][k] for s in steps) for k in steps[0]["timing"]},
        "decode_ms_per_step": [
            1e3 * s["stages"]["generate_sequences"]["s"] / max(1, s["engine"]["decode_steps"])
            for s in steps
        ],
    }
    utilization = {st: [s["stages"][st].get("gpu_util") for s in steps] for st in steps[0]["stages"]}
    if all(u is not None for per_step in utilization.values() for u in per_step):
        out["gpu_util_pct"] = {st: statistics.fmean(u["mean_pct"] for u in per_step)
                               for st, per_step in utilization.items()}  # fmt: skip
    if "peak_gib" in steps[0]["stages"].get("update_actor", {}):
        out["peak_gib"] = {st: max(s["stages"][st]["peak_gib"] for s in steps)
                           for st in steps[0]["stages"]}
        out["allocated_before_gib"] = {
            st: max(s["stages"][st]["allocated_before_gib"] for s in steps)
            for st in steps[0]["stages"]
        }
        out["step_peak_gib"] = max(out["peak_gib"].values())
    logger.info("%s: %s", name, json.dumps(out))
    return out


def device_peak(name: str) -> float | None:
    return next((tf for key, tf in PEAK_BF16_TFLOPS.items() if key in name), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen2.5-0.5b",
                        help="qwen2.5-0.5b, or a tiny size (nano|tiny|small) for a CPU check")
    parser.add_argument("--prompts", type=int, default=32, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="GRPO group size")
    parser.add_argument("--prompt-length", type=int, default=256)
    parser.add_argument("--prompt-words", type=int, default=150)
    parser.add_argument("--response-length", type=int, default=512)
    parser.add_argument("--token-budget", type=int, default=8192,
                        help="ppo_max_token_len_per_gpu (token-budget micro-batches)")
    parser.add_argument("--bucket-mb", type=int, default=512,
                        help="rollout.update_weights_bucket_megabytes")
    parser.add_argument("--no-checkpointing", dest="checkpointing", action="store_false")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--configs", default="resident,offload")
    parser.add_argument("--estimator", default="grpo", choices=["grpo", "gae"],
                        help="gae: PPO with a critic (its forward and update are timed too)")
    parser.add_argument("--check-resume", action="store_true",
                        help="after the timed steps: save, step, load; weights must match")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the GPU's dense bf16 peak (default: from the device name)")
    parser.add_argument("--kv-cache", default="chunked", choices=KV_CACHES,
                        help="rollout.engine_kwargs.kv_cache: the hf engine's chunked cache or "
                             "transformers' DynamicCache (issue 27's first-step reference)")
    parser.add_argument("--profile", action="store_true",
                        help="one more step after the timed ones with the old log-probs and "
                             "the update under torch.profiler: device busy time, top operators")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if cuda else "cpu"
    if args.peak_tflops is None and cuda:
        args.peak_tflops = device_peak(device)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    result: dict[str, Any] = {
        "bench": "gpu_step", "device": device, "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"), "shape": args.shape,
        "prompts": args.prompts, "n": args.n, "prompt_length": args.prompt_length,
        "response_length": args.response_length, "token_budget": args.token_budget,
        "gradient_checkpointing": args.checkpointing, "estimator": args.estimator, "kv_cache": args.kv_cache, "peak_bf16_tflops": peak and peak / 1e12,
    }
    with tempfile.TemporaryDirectory(prefix="agentrl_gpu_step_") as tmp:
        tmp_path = Path(tmp)
        started = time.perf_counter()
        model_dir = build_model(tmp_path / "model", args.shape, args.seed)
        data = write_prompts(tmp_path / "train.parquet", args.prompts * 4, args.prompt_words,
                             args.seed)
        result["build_s"] = time.perf_counter() - started
        for name in args.configs.split(","):
            result[name] = run_config(name, args, model_dir, data, tmp_path)
            if cuda:
                torch.cuda.empty_cache()
    line = json.dumps(result)
    print(line)
    if args.out:
        Path(args.out).write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
