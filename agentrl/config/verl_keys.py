"""verl config keys and values that agentrl takes as they are written in verl's scripts.

Two tables, applied by the loader (agentrl/config/loader.py):

- `INERT`: keys of verl internals that have no meaning here (verl's profilers, Megatron
  parallelism sections, rollout-trace backends, vLLM/SGLang wake-up staging). They cannot
  change what a run computes, so a verl script that sets them runs: the loader drops them
  and logs one warning that names each and why it has no effect. Keys that would change
  results if ignored are not here; they stay unknown keys (an error) or are refused by
  `validate.NOT_YET`.
- `KEY_ALIASES`: verl's other names of a key (older verl's `multi_turn.max_turns`, newer
  verl's `ray_kwargs.ray_init`), moved to agentrl's name before validation.
- `DEPRECATED_KEYS`: agentrl's own former names of a key or section, moved the same way
  with a deprecation warning that names the new key.
- `VALUE_ALIASES`: verl's other spellings of a value (`model_dtype: bfloat16`,
  `multi_turn.format: qwen`), rewritten to agentrl's canonical one before validation.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

_PROFILER = "verl's profiler; profile agentrl with torch.profiler or py-spy"
_MEGATRON = "Megatron-LM parallelism; agentrl shards with FSDP2 (the same update)"
_UNPADDED = ("packed (unpadded) sequences in the FSDP forward; agentrl cuts micro-batches by "
             "token budget (use_dynamic_bsz), the same log-probs")
_KERNELS = "fused/Liger kernels: speed, the same math"
_VLLM = "a vLLM engine option; SGLang server flags go in rollout.engine_kwargs"

# dotted key (a whole section when it names one) -> why it has no effect here
INERT: dict[str, str] = {
    "global_profiler": _PROFILER,
    "trainer.profile_steps": _PROFILER,
    "trainer.controller_nsight_options": _PROFILER,
    "trainer.worker_nsight_options": _PROFILER,
    "trainer.npu_profile": _PROFILER,
    "actor_rollout_ref.actor.profiler": _PROFILER,
    "actor_rollout_ref.ref.profiler": _PROFILER,
    "actor_rollout_ref.rollout.profiler": _PROFILER,
    "critic.profiler": _PROFILER,
    "reward_model.profiler": _PROFILER,
    "actor_rollout_ref.actor.megatron": _MEGATRON,
    "actor_rollout_ref.ref.megatron": _MEGATRON,
    "critic.megatron": _MEGATRON,
    "reward_model.megatron": _MEGATRON,
    "actor_rollout_ref.rollout.multi_stage_wake_up": (
        "staged weight/KV-cache wake-up of a colocated engine; agentrl wakes its engine "
        "in one call"),
    "actor_rollout_ref.rollout.trace": (
        "rollout tracing to weave/mlflow; agentrl writes trajectories with "
        "trainer.rollout_data_dir and `agentrl report`"),
    "actor_rollout_ref.rollout.layered_summon": (
        "layer-by-layer FSDP gather for LoRA sync; agentrl's weight sync always gathers in "
        "buckets (update_weights_bucket_megabytes)"),
    "actor_rollout_ref.rollout.disable_log_stats": "vLLM engine logging",
    "actor_rollout_ref.rollout.agent.num_workers": (
        "verl's agent-loop worker processes; agentrl runs every request as an asyncio task "
        "in the trainer's process"),
    "trainer.use_legacy_worker_impl": "verl's choice between its two worker implementations",
    "actor_rollout_ref.model.use_remove_padding": _UNPADDED,
    "critic.model.use_remove_padding": _UNPADDED,
    "actor_rollout_ref.model.use_shm": "loading the model through /dev/shm",
    "actor_rollout_ref.model.use_liger": _KERNELS,
    "actor_rollout_ref.model.use_fused_kernels": _KERNELS,
    "actor_rollout_ref.rollout.max_num_batched_tokens": _VLLM,
    "actor_rollout_ref.rollout.enforce_eager": _VLLM,
    "actor_rollout_ref.rollout.load_format": (
        "how verl's engine loads its first weights; agentrl's engines load the model "
        "directory and then receive the actor's weights"),
    "reward_model.launch_reward_fn_async": (
        "overlapping reward scoring with the old-log-prob pass (the same rewards)"),
    "ray_init.timeline_json_file": "Ray's timeline dump",
    "actor_rollout_ref.rollout.agent.default_agent_loop": (
        "verl's agent-loop class; agentrl's engine is the tool agent loop with "
        "multi_turn.enable and a single generation without"),
}

# verl's key (or section) -> agentrl's
KEY_ALIASES: dict[str, str] = {
    "actor_rollout_ref.rollout.multi_turn.max_turns": (
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns"),
    "ray_kwargs.ray_init": "ray_init",
}

# agentrl's former key (or section) -> its name now; using one warns (DeprecationWarning)
DEPRECATED_KEYS: dict[str, str] = {
    "async": "off_policy",  # "async" is the asyncio engine; the section is off-policy training
    # engine processes, not agents (agent mode is rollout.agent_function)
    "actor_rollout_ref.rollout.agent_workers": "actor_rollout_ref.rollout.engine_workers",
}
_ALL_ALIASES = {**KEY_ALIASES, **DEPRECATED_KEYS}

_DTYPES = {"fp32": "fp32", "float32": "fp32", "float": "fp32",
           "bf16": "bf16", "bfloat16": "bf16",
           "fp16": "fp16", "float16": "fp16", "half": "fp16"}
_DTYPE_KEYS = [
    f"{prefix}.fsdp_config.{leaf}"
    for prefix in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model",
                   "reward_model.model")
    for leaf in ("model_dtype", "mixed_precision.param_dtype", "mixed_precision.reduce_dtype",
                 "mixed_precision.buffer_dtype")
]
# key -> {verl spelling: agentrl spelling}
VALUE_ALIASES: dict[str, dict[str, str]] = {
    **{key: _DTYPES for key in _DTYPE_KEYS},
    # verl's rollout modes differ in how requests are scheduled, not in what they compute;
    # agentrl's engine is always per-request async. `sglang_async` is older verl's name.
    "actor_rollout_ref.rollout.mode": {"sync": "async"},
    "actor_rollout_ref.rollout.name": {"sglang_async": "sglang"},
    # verl's search example writes `format: qwen`: Qwen2.5's <tool_call>{json}</tool_call>,
    # which is the hermes parser here. `chatml` is the older verl spelling of the same.
    "actor_rollout_ref.rollout.multi_turn.format": {"qwen": "hermes", "chatml": "hermes"},
}


def parent_of(tree: DictConfig, key: str) -> tuple[Any, str]:
    """The node holding dotted `key` in `tree` (None when there is none) and `key`'s last
    part: `parent_of(cfg, "a.b.c")` is `(cfg.a.b, "c")`."""
    parent_key, _, leaf = key.rpartition(".")
    return (OmegaConf.select(tree, parent_key, default=None) if parent_key else tree), leaf


def rename_keys(tree: DictConfig) -> list[tuple[str, str]]:
    """Move every `KEY_ALIASES` and `DEPRECATED_KEYS` key present in `tree` to agentrl's name
    (a section is merged into agentrl's); return `(old key, agentrl key)` for each move."""
    moved = []
    for old, new in _ALL_ALIASES.items():
        parent, leaf = parent_of(tree, old)
        if not isinstance(parent, DictConfig) or leaf not in parent:
            continue
        value = parent._get_node(leaf)
        del parent[leaf]
        _prune_empty(tree, old.rpartition(".")[0])  # an emptied verl-only section (ray_kwargs)
        OmegaConf.update(tree, new, value, force_add=True, merge=True)
        moved.append((old, new))
    return moved


def alias_of(key: str) -> str:
    """A dotted key with a `KEY_ALIASES` or `DEPRECATED_KEYS` prefix replaced by agentrl's
    name."""
    for old, new in _ALL_ALIASES.items():
        if key == old or key.startswith(old + "."):
            return new + key[len(old):]
    return key


def is_inert(key: str) -> bool:
    """Whether a dotted key is an `INERT` key or lies under one."""
    return any(key == inert or key.startswith(inert + ".") for inert in INERT)


def pop_inert_keys(tree: DictConfig) -> list[tuple[str, str]]:
    """Remove every `INERT` key present in `tree`; return `(key, why)` for each."""
    removed = []
    for key, why in INERT.items():
        parent, leaf = parent_of(tree, key)
        if isinstance(parent, DictConfig) and leaf in parent:
            del parent[leaf]
            removed.append((key, why))
            _prune_empty(tree, key.rpartition(".")[0])
    return removed


def _prune_empty(tree: DictConfig, key: str) -> None:
    """Remove `key` and its parents while they are mappings left empty (verl-only sections
    such as `rollout.agent` once their inert keys are gone)."""
    while key:
        parent, leaf = parent_of(tree, key)
        node = parent._get_node(leaf) if isinstance(parent, DictConfig) else None
        if not isinstance(node, DictConfig) or len(node) > 0:
            return
        del parent[leaf]
        key = key.rpartition(".")[0]


def normalise_values(cfg: DictConfig) -> list[tuple[str, str, str]]:
    """Rewrite verl's spellings in `cfg` (resolved, writable) in place; return
    `(key, verl value, agentrl value)` for each rewrite."""
    changed = []
    for key, aliases in VALUE_ALIASES.items():
        value = OmegaConf.select(cfg, key, default=None)
        if isinstance(value, str) and value in aliases and aliases[value] != value:
            OmegaConf.update(cfg, key, aliases[value])
            changed.append((key, value, aliases[value]))
    return changed


__all__ = [
    "INERT",
    "KEY_ALIASES",
    "VALUE_ALIASES",
    "alias_of",
    "is_inert",
    "normalise_values",
    "parent_of",
    "pop_inert_keys",
    "rename_keys",
]
