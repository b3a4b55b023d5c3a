"""`create_backend` and `server_launcher`: the configured inference backend, from
`actor_rollout_ref.rollout`, through its plugin (agentrl/rollout/backends/registry.py).

    backend = create_backend(cfg.actor_rollout_ref.rollout, model_path, tokenizer)
    launcher = server_launcher(rollout_dict, model_path)      # servers only, not started

- `name: hf`: an `HFBackend` in this process (agentrl/rollout/backends/hf.py); with `model`
  given it generates with that very module (the trainer's, colocated; no weight copy).
- `name: sglang`: an `SGLangBackend` on `server_urls`, or on servers it launches
  (agentrl/rollout/backends/sglang.py); the backend's `aclose()` stops them.
- `name: vllm`: a `VLLMBackend` on `server_urls`, or on vLLM servers it launches under
  `server_python` (agentrl/rollout/backends/vllm.py).
- `name: scripted`: a `ScriptedBackend` answering from `engine_kwargs.replies`
  (agentrl/rollout/backends/scripted.py), a fixed policy for tests.
- any other name: a user's registered plugin or the dotted path of one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig

from agentrl.rollout.backends.base import GenerationBackend
from agentrl.rollout.backends.registry import backend_plugin
from agentrl.utils.plain_config import plain_dict


def create_backend(
    rollout_config: DictConfig | Mapping[str, Any],
    model_path: str | None,
    tokenizer: Any,
    model: Any = None,
    seed: int | None = None,
    gpus: Sequence[str] | None = None,
) -> GenerationBackend:
    """The backend `rollout_config.name` names (see the module docstring).

    `rollout_config` is the validated `actor_rollout_ref.rollout` config: every key is
    there, with the defaults of agentrl/config/ppo_trainer.yaml. `seed` (the trainer's) seeds
    the hf sampler unless `engine_kwargs.seed` is set. `gpus` (as CUDA_VISIBLE_DEVICES names
    them) are the GPUs launched servers share; None -> this process's.
    """
    cfg = plain_dict(rollout_config, "actor_rollout_ref.rollout")
    return backend_plugin(cfg["name"]).create(cfg, model_path, tokenizer, model=model,
                                              seed=seed, gpus=gpus)  # fmt: skip


def server_launcher(
    cfg: Mapping[str, Any],
    model_path: str,
    *,
    seed: int | None = None,
    trust_remote_code: bool = False,
    env: dict[str, str] | None = None,
    host: str = "127.0.0.1",
    gpus: Sequence[str] | None = None,
) -> Any:
    """The inference servers of a plain ``rollout`` config dict, not started (a
    ``ServerLauncher``): ``agentrl serve`` processes of the embedded engine for ``name: hf``
    (``seed``: the trainer's; ``env``: e.g. their thread count), else the engine's own.
    ``host`` is where they listen and what their URLs name. Servers share ``gpus`` (None:
    this process's visible GPUs), ``tensor_model_parallel_size`` each."""
    cfg = plain_dict(cfg, "actor_rollout_ref.rollout")
    return backend_plugin(cfg["name"]).launcher(
        cfg, model_path, seed=seed, trust_remote_code=trust_remote_code, env=env, host=host,
        gpus=gpus,
    )  # fmt: skip


def backend_client(cfg: Mapping[str, Any], urls: Sequence[str], tokenizer: Any,
                   **kwargs: Any) -> Any:  # fmt: skip
    """An HTTP client of the running servers at ``urls`` of ``cfg``'s engine (what the
    off-policy producer and the sharded engine's workers use)."""
    cfg = plain_dict(cfg, "actor_rollout_ref.rollout")
    return backend_plugin(cfg["name"]).client(cfg, list(urls), tokenizer, **kwargs)


def prompt_scorer(urls: Sequence[str], request_timeout: float) -> Any:
    """A client whose ``prompt_log_probs(ids, request_id)`` scores a token sequence on
    servers of SGLang's ``/generate`` with input log-probs (SGLang, or ``agentrl serve``):
    what an on-policy distillation teacher behind HTTP answers."""
    from agentrl.rollout.backends.sglang import SGLangBackend

    return SGLangBackend(list(urls), request_timeout=request_timeout)


__all__ = ["backend_client", "create_backend", "prompt_scorer", "server_launcher"]
