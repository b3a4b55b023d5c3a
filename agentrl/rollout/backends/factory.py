"""`create_backend`: the configured inference backend, from `actor_rollout_ref.rollout`.

    backend = create_backend(cfg.actor_rollout_ref.rollout, model_path, tokenizer)

- `name: hf`: an `HFBackend` in this process. With `model` given it generates with that
  very module (the trainer's, colocated; no weight copy); else it loads `model_path`
  (fp32 on CPU, `rollout.dtype` on GPU). `engine_kwargs` go to `HFBackend` (`batch_wait_s`,
  `seed`, `device`).
- `name: sglang`: an `SGLangBackend` on `server_urls`. When `server_urls` is empty it
  first launches `num_servers` servers of `model_path` with `launch_command` (default
  `python -m sglang.launch_server`), `tensor_model_parallel_size` as `--tp`,
  `gpu_memory_utilization` as `--mem-fraction-static`, `free_cache_engine` as
  `--enable-memory-saver` and `engine_kwargs` as further flags; the backend's `aclose()`
  stops them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from agentrl.rollout.backends.base import GenerationBackend
from agentrl.rollout.backends.hf import HFBackend
from agentrl.rollout.backends.launcher import ServerLauncher
from agentrl.rollout.backends.sglang import SGLangBackend

logger = logging.getLogger(__name__)

BACKENDS = ("hf", "sglang")


def create_backend(
    rollout_config: DictConfig | Mapping[str, Any],
    model_path: str | None,
    tokenizer: Any,
    model: torch.nn.Module | None = None,
) -> GenerationBackend:
    """The backend `rollout_config.name` names (see the module docstring)."""
    cfg = _as_dict(rollout_config)
    name = cfg.get("name", "hf")
    if name == "hf":
        return _hf_backend(cfg, model_path, tokenizer, model)
    if name == "sglang":
        return _sglang_backend(cfg, model_path, tokenizer)
    raise ValueError(f"actor_rollout_ref.rollout.name must be one of {BACKENDS}, got {name!r}")


def _as_dict(config: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(config, DictConfig):
        return OmegaConf.to_container(config, resolve=True)
    return dict(config)


def _hf_backend(
    cfg: dict[str, Any], model_path: str | None, tokenizer: Any, model: torch.nn.Module | None
) -> HFBackend:
    kwargs = dict(cfg.get("engine_kwargs") or {})
    options = {
        "max_num_seqs": cfg.get("max_num_seqs", 64),
        "max_model_len": cfg.get("max_model_len"),
    }
    device = kwargs.pop("device", None)
    if model is not None:
        return HFBackend(model, tokenizer, **options, **kwargs)
    if not model_path:
        raise ValueError("the hf backend needs actor_rollout_ref.model.path (or a model)")
    return HFBackend.from_pretrained(
        model_path, tokenizer, device=device, dtype=cfg.get("dtype"), **options, **kwargs
    )


def _sglang_backend(cfg: dict[str, Any], model_path: str | None, tokenizer: Any) -> SGLangBackend:
    urls = list(cfg.get("server_urls") or [])
    launcher = None
    if not urls:
        if not model_path:
            raise ValueError(
                "launching sglang servers needs actor_rollout_ref.model.path "
                "(or set actor_rollout_ref.rollout.server_urls)"
            )
        launcher = _launcher(cfg, model_path)
        urls = launcher.start()
    return SGLangBackend(
        urls,
        control_urls=list(cfg.get("control_urls") or []) or None,
        request_timeout=cfg.get("request_timeout", 600.0),
        max_retries=cfg.get("max_retries", 3),
        load_balance=cfg.get("load_balance", "least_loaded"),
        return_logprob=cfg.get("calculate_log_probs", True),
        tokenizer=tokenizer,
        update_weights_bucket_megabytes=cfg.get("update_weights_bucket_megabytes", 512),
        on_close=launcher.stop if launcher else None,
    )


def _launcher(cfg: dict[str, Any], model_path: str) -> ServerLauncher:
    tp = cfg.get("tensor_model_parallel_size", 1)
    num_servers = cfg.get("num_servers")
    if num_servers is None:
        num_servers = max(1, torch.cuda.device_count() // tp) if torch.cuda.is_available() else 1
    command = cfg.get("launch_command")
    server_args: dict[str, Any] = {}
    if command is None:  # SGLang's own flags; a custom command gets only engine_kwargs
        server_args = {
            "tp": tp,
            "mem_fraction_static": cfg.get("gpu_memory_utilization"),
            "enable_memory_saver": cfg.get("free_cache_engine", False),
            "dtype": cfg.get("dtype"),
        }
    server_args.update(cfg.get("engine_kwargs") or {})
    return ServerLauncher(
        model_path,
        num_servers,
        server_args=server_args,
        command=command,
        gpus_per_server=tp if torch.cuda.is_available() else 0,
        ready_timeout=cfg.get("launch_timeout", 600.0),
    )
