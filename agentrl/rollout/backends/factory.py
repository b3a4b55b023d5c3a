"""`create_backend`: the configured inference backend, from `actor_rollout_ref.rollout`.

    backend = create_backend(cfg.actor_rollout_ref.rollout, model_path, tokenizer)

- `name: hf`: an `HFBackend` in this process. With `model` given it generates with that
  very module (the trainer's, colocated; no weight copy); else it loads `model_path`
  (fp32 on CPU, `rollout.dtype` on GPU). `engine_kwargs` go to `HFBackend` (`batch_wait_s`,
  `seed`, `device`, `kv_cache`).
- `name: sglang`: an `SGLangBackend` on `server_urls`. When `server_urls` is empty it
  first launches `num_servers` servers of `model_path` with `launch_command` (default
  `python -m sglang.launch_server`), `tensor_model_parallel_size` as `--tp`,
  `gpu_memory_utilization` as `--mem-fraction-static`, `free_cache_engine` as
  `--enable-memory-saver` and `engine_kwargs` as further flags; the backend's `aclose()`
  stops them. Server i gets GPUs i*tp .. (i+1)*tp-1 of `gpus` (default: those this process
  may use; `num_servers` null -> as many servers as they hold). `load_balance` and
  `server_cooldown_s` set its routing and failover.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from agentrl.rollout.backends.base import (
    BACKENDS,
    HF_ENGINE_KWARGS,
    GenerationBackend,
    unknown_hf_engine_kwargs,
)
from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.launcher import ServerLauncher, visible_gpus
from agentrl.rollout.backends.sglang import SGLangBackend

logger = logging.getLogger(__name__)

SERVE_COMMAND = (sys.executable, "-m", "agentrl.rollout.backends.serve_cli")
SERVE_MAX_NUM_SEQS = 4096  # rollout.max_num_seqs null: every waiting request joins a batch


def create_backend(
    rollout_config: DictConfig | Mapping[str, Any],
    model_path: str | None,
    tokenizer: Any,
    model: torch.nn.Module | None = None,
    seed: int | None = None,
    gpus: Sequence[str] | None = None,
) -> GenerationBackend:
    """The backend `rollout_config.name` names (see the module docstring).

    `rollout_config` is the validated `actor_rollout_ref.rollout` config: every key is
    there, with the defaults of agentrl/config/ppo_trainer.yaml. `seed` (the trainer's) seeds
    the hf sampler unless `engine_kwargs.seed` is set. `gpus` (as CUDA_VISIBLE_DEVICES names
    them) are the GPUs launched sglang servers share; None -> this process's.
    """
    cfg = _as_dict(rollout_config)
    name = cfg["name"]
    if name == "hf":
        return _hf_backend(cfg, model_path, tokenizer, model, seed)
    if name == "sglang":
        return _sglang_backend(cfg, model_path, tokenizer, gpus)
    raise ValueError(f"actor_rollout_ref.rollout.name must be one of {BACKENDS}, got {name!r}")


def _as_dict(config: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(config, DictConfig):
        return OmegaConf.to_container(config, resolve=True)
    return dict(config)


def _hf_backend(
    cfg: dict[str, Any],
    model_path: str | None,
    tokenizer: Any,
    model: torch.nn.Module | None,
    seed: int | None = None,
) -> HFBackend:
    kwargs = dict(cfg["engine_kwargs"] or {})
    if seed is not None:
        kwargs.setdefault("seed", seed)
    options = {
        "max_num_seqs": cfg["max_num_seqs"],
        "max_model_len": cfg["max_model_len"],
    }
    device = kwargs.pop("device", None)
    if model is not None:
        return HFBackend(model, tokenizer, **options, **kwargs)
    if not model_path:
        raise ValueError("the hf backend needs actor_rollout_ref.model.path (or a model)")
    return HFBackend.from_pretrained(
        model_path, tokenizer, device=device, dtype=cfg["dtype"], **options, **kwargs
    )


def _sglang_backend(cfg: dict[str, Any], model_path: str | None, tokenizer: Any,
                    gpus: Sequence[str] | None) -> SGLangBackend:  # fmt: skip
    urls = list(cfg["server_urls"] or [])
    launcher = None
    if not urls:
        if not model_path:
            raise ValueError(
                "launching sglang servers needs actor_rollout_ref.model.path "
                "(or set actor_rollout_ref.rollout.server_urls)"
            )
        launcher = server_launcher(cfg, model_path, gpus=gpus)
        urls = launcher.start()
    return SGLangBackend(
        urls,
        control_urls=list(cfg["control_urls"] or []) or None,
        request_timeout=cfg["request_timeout"],
        max_retries=cfg["max_retries"],
        load_balance=cfg["load_balance"],
        return_logprob=cfg["calculate_log_probs"],
        tokenizer=tokenizer,
        update_weights_bucket_megabytes=cfg["update_weights_bucket_megabytes"],
        server_cooldown_s=cfg["server_cooldown_s"],
        on_close=launcher.stop if launcher else None,
    )


def server_launcher(
    cfg: dict[str, Any],
    model_path: str,
    *,
    seed: int | None = None,
    trust_remote_code: bool = False,
    env: dict[str, str] | None = None,
    host: str = "127.0.0.1",
    gpus: Sequence[str] | None = None,
) -> ServerLauncher:
    """The inference servers of a plain ``rollout`` config dict, not started: for
    ``name: hf`` ``agentrl serve`` processes of the embedded engine (``seed``: the trainer's;
    ``env``: e.g. their thread count), else SGLang's (or ``launch_command``'s). ``host`` is
    where they listen and what their URLs name: an address other nodes reach when processes
    there call them. SGLang servers share ``gpus`` (None: this process's visible GPUs),
    ``tensor_model_parallel_size`` each."""
    if cfg["name"] == "hf":
        return _serve_launcher(cfg, model_path, seed, trust_remote_code, env, host)
    tp = cfg["tensor_model_parallel_size"]
    if gpus is None and torch.cuda.is_available():  # the GPUs this process sees
        gpus = (visible_gpus() or [str(i) for i in range(torch.cuda.device_count())])[
            : torch.cuda.device_count()
        ]
    num_servers = cfg["num_servers"]
    if num_servers is None:
        num_servers = max(1, len(gpus) // tp) if gpus else 1
    command = cfg["launch_command"]
    server_args: dict[str, Any] = {}
    if command is None:  # SGLang's own flags; a custom command gets only engine_kwargs
        server_args = {
            "tp": tp,
            "mem_fraction_static": cfg["gpu_memory_utilization"],
            "enable_memory_saver": cfg["free_cache_engine"],
            "dtype": cfg["dtype"],
        }
    server_args.update(cfg["engine_kwargs"] or {})
    return ServerLauncher(
        model_path,
        num_servers,
        server_args=server_args,
        command=command,
        gpus_per_server=tp if gpus else 0,
        gpus=gpus,
        ready_timeout=cfg["launch_timeout"],
        env=env,
        host=host,
    )


def _serve_launcher(cfg: dict[str, Any], model_path: str, seed: int | None,
                    trust_remote_code: bool, env: dict[str, str] | None,
                    host: str) -> ServerLauncher:  # fmt: skip
    """``agentrl serve`` servers of the policy for ``rollout.name=hf`` (its engine keys as
    the server's flags)."""
    kwargs = dict(cfg["engine_kwargs"] or {})
    unknown = unknown_hf_engine_kwargs(kwargs)
    if unknown:
        raise ValueError(f"actor_rollout_ref.rollout.engine_kwargs {unknown} are not hf "
                         f"engine keys (those are {', '.join(HF_ENGINE_KWARGS)})")
    wait = kwargs.get("batch_wait_s")
    server_args = {
        "max_num_seqs": cfg["max_num_seqs"] or SERVE_MAX_NUM_SEQS,
        "seed": kwargs.get("seed", seed),
        "device": kwargs.get("device"),
        "dtype": cfg["dtype"] if torch.cuda.is_available() else None,
        "context_length": cfg["max_model_len"],
        "batch_wait_ms": None if wait is None else float(wait) * 1000,
        "kv_cache": kwargs.get("kv_cache"),
        "trust_remote_code": trust_remote_code,
    }
    return ServerLauncher(model_path, int(cfg["num_servers"] or 1), command=SERVE_COMMAND,
                          server_args=server_args, ready_timeout=cfg["launch_timeout"], env=env,
                          host=host)
