"""Cross-key rules of the configuration: choices, bounds and batch-size arithmetic.

Each rule returns messages naming the keys that disagree and their values, so a run stops
before any worker starts. The batch arithmetic follows verl's: a training step takes
`data.train_batch_size` prompts, each rolled out `rollout.n` times; an optimizer step takes
`ppo_mini_batch_size` prompts (x n trajectories) split evenly across the
`trainer.nnodes * trainer.n_gpus_per_node` workers, each doing forward/backward in
micro-batches of `ppo_micro_batch_size_per_gpu` trajectories.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from agentrl.algos import EstimatorNeeds

# Types of keys that take more than their default's type (a word or a bool).
MIXED_TYPES: dict[str, tuple[type, ...]] = {
    "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_offload": (str, bool),
}
# Types of keys whose default is null (a null default says nothing about the type).
NULLABLE_TYPES: dict[str, type | tuple[type, ...]] = {
    "data.val_batch_size": int,
    **{f"reward_model.judge.{key}": str
       for key in ("url", "model", "api_key_env", "prompt_template")},
    "actor_rollout_ref.teacher.model.path": str,
    "actor_rollout_ref.teacher.model.external_lib": str,
    "actor_rollout_ref.teacher.log_prob_micro_batch_size": int,
    "actor_rollout_ref.teacher.log_prob_micro_batch_size_per_gpu": int,
    "reward_model.judge.requests_per_minute": (float, int),
    "reward_model.judge.tokens_per_minute": (float, int),
    "actor_rollout_ref.actor.ppo_micro_batch_size": int,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": int,
    "actor_rollout_ref.actor.clip_ratio_low": (float, int),
    "actor_rollout_ref.actor.clip_ratio_high": (float, int),
    "actor_rollout_ref.actor.policy_loss.rollout_rs_threshold_lower": (float, int),
    "actor_rollout_ref.ref.log_prob_micro_batch_size": int,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": int,
    "actor_rollout_ref.rollout.max_model_len": int,
    "actor_rollout_ref.rollout.num_servers": int,
    "actor_rollout_ref.rollout.launch_command": str,
    "actor_rollout_ref.rollout.weights_dir": str,
    "actor_rollout_ref.rollout.server_python": str,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size": int,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": int,
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": int,
    "actor_rollout_ref.rollout.multi_turn.max_user_turns": int,
    "actor_rollout_ref.rollout.multi_turn.max_new_tokens_per_turn": int,
    "data.path": (str, list),
    "data.sampler.class_path": str,
    "actor_rollout_ref.rollout.agent_function": str,
    "actor_rollout_ref.rollout.engine_class": str,
    "actor_rollout_ref.model.target_modules": (str, list),
    **{f"trainer.alerts.{key}": (float, int) for key in (
        "tool_call_rate_drop", "parse_error_rate", "tool_error_rate", "truncation_rate",
        "response_length_collapse", "entropy_floor", "tokenization_drift_rate")},
    "data.sampler.class_name": str,
    "data.output_path": str,
    "critic.ppo_micro_batch_size": int,
    "critic.ppo_micro_batch_size_per_gpu": int,
    "critic.forward_micro_batch_size_per_gpu": int,
    "reward_model.micro_batch_size_per_gpu": int,
    "reward_model.max_length": int,
    "trainer.total_training_steps": int,
    "trainer.max_actor_ckpt_to_keep": int,
    "trainer.max_critic_ckpt_to_keep": int,
    "ray_init.num_cpus": int,
    "actor_rollout_ref.rollout.max_num_seqs": int,
    "actor_rollout_ref.actor.use_dynamic_bsz": bool,
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": bool,
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": bool,
    "critic.use_dynamic_bsz": bool,
}

_STRATEGIES = ("fsdp", "fsdp2")
CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")  # workers/checkpoint.py

# the optimizer's schedules after warmup (agentrl/workers/optim.py imports this list)
WARMUP_STYLES = ("constant", "cosine")

# key -> allowed values (None stands for null).
# agent mode's client of the in-process gateway (agentrl/gateway/agent_rollout.py)
AGENT_CLIENTS = ("openai", "anthropic")
AGENT_SEGMENTS = ("all", "last")  # which segments of a session train (docs/gateway.md)
AGENT_SIDE_CALLS = ("record", "train")  # whether its side calls train
SEGMENT_WEIGHTING = ("token", "episode")  # actor.segment_weighting (agentrl/algos/segments.py)

CHOICES: dict[str, tuple[Any, ...]] = {
    "data.truncation": ("error", "left", "right", "middle"),
    "actor_rollout_ref.rollout.agent_client": AGENT_CLIENTS,
    "actor_rollout_ref.rollout.agent_segments": AGENT_SEGMENTS,
    "actor_rollout_ref.rollout.agent_side_calls": AGENT_SIDE_CALLS,
    "actor_rollout_ref.actor.segment_weighting": SEGMENT_WEIGHTING,
    "actor_rollout_ref.actor.strategy": _STRATEGIES,
    "actor_rollout_ref.ref.strategy": _STRATEGIES,
    "critic.strategy": _STRATEGIES,
    "reward_model.strategy": _STRATEGIES,
    "actor_rollout_ref.actor.optim.warmup_style": WARMUP_STYLES,
    "critic.optim.warmup_style": WARMUP_STYLES,
    "actor_rollout_ref.actor.fsdp_config.model_dtype": ("fp32", "bf16", "fp16"),
    "critic.model.fsdp_config.model_dtype": ("fp32", "bf16", "fp16"),
    "reward_model.model.fsdp_config.model_dtype": ("fp32", "bf16", "fp16"),
    "actor_rollout_ref.ref.fsdp_config.model_dtype": ("fp32", "bf16", "fp16"),
    "actor_rollout_ref.rollout.mode": ("async",),
    "actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side": ("left", "right",
                                                                          "middle"),
    "actor_rollout_ref.rollout.multi_turn.tool_record_mode": (None, "record", "replay"),
    "trainer.device": ("auto", "cpu", "cuda"),
    "trainer.resume_mode": ("auto", "disable", "resume_path"),
    "trainer.worker_group": ("auto", "ray", "in_process"),
    "trainer.mode": ("sync", "one_step_off", "async"),
    "trainer.watchdog_action": ("log", "stop"),
}
# trainer.logger: the tracker's backends (agentrl/trainer/tracking.py imports this list)
LOGGERS = ("console", "file", "tensorboard", "wandb", "mlflow")
LIST_CHOICES: dict[str, tuple[str, ...]] = {
    "trainer.logger": LOGGERS,
    "actor_rollout_ref.actor.checkpoint.save_contents": CHECKPOINT_CONTENTS,
    "actor_rollout_ref.actor.checkpoint.load_contents": CHECKPOINT_CONTENTS,
    "critic.checkpoint.save_contents": CHECKPOINT_CONTENTS,
    "critic.checkpoint.load_contents": CHECKPOINT_CONTENTS,
}
# verl keys whose feature agentrl does not have yet: accepted at their default, refused
# otherwise (a run must never silently lack what its config turned on).
_NO_SP = "sequence parallelism is not supported yet"
_NO_COMPILE = "torch.compile is not wired into the workers yet"
NOT_YET: dict[str, tuple[tuple[Any, ...], str]] = {
    "actor_rollout_ref.model.enable_activation_offload": (
        (False,), "activation offload is not implemented (enable_gradient_checkpointing "
                  "saves activation memory)"),
    "actor_rollout_ref.actor.use_torch_compile": ((False,), _NO_COMPILE),
    "actor_rollout_ref.ref.use_torch_compile": ((False,), _NO_COMPILE),
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": ((1,), _NO_SP),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": ((1,), _NO_SP),
    "critic.ulysses_sequence_parallel_size": ((1,), _NO_SP),
    "actor_rollout_ref.hybrid_engine": ((True,), "actor and rollout always share processes "
                                                 "(colocated) for now"),
    "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template": (
        (False,), "the rollout renders with the training chat template (token-exact "
                  "trajectories); the inference template, which drops earlier reasoning, is "
                  "not used"),
}

# Keys that must be >= 1 (when not null).
POSITIVE: tuple[str, ...] = (
    "trainer.alerts.window",
    "actor_rollout_ref.rollout.engine_workers",
    "data.train_batch_size", "data.max_prompt_length", "data.max_response_length",
    "data.val_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_epochs", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.n", "actor_rollout_ref.rollout.val_kwargs.n",
    "actor_rollout_ref.rollout.max_concurrent_requests", "actor_rollout_ref.rollout.max_num_seqs",
    "actor_rollout_ref.rollout.num_servers",
    "actor_rollout_ref.rollout.canary_every_n", "actor_rollout_ref.rollout.canary_count",
    "actor_rollout_ref.rollout.canary_length", "actor_rollout_ref.rollout.canary_margin",
    "actor_rollout_ref.rollout.multi_turn.max_parallel_calls",
    "actor_rollout_ref.rollout.multi_turn.max_tool_response_length",
    "actor_rollout_ref.rollout.multi_turn.max_concurrent_tool_calls",
    "actor_rollout_ref.rollout.multi_turn.max_new_tokens_per_turn",
    "trainer.nnodes", "trainer.n_gpus_per_node", "trainer.total_epochs",
)

# Keys that must be >= 0 (when not null), with what 0 means.
NON_NEGATIVE: dict[str, str] = {
    "algorithm.filter_groups.max_num_gen_batches": "0: no limit",
    "off_policy.max_staleness": "0: only the newest version",
    "trainer.watchdog_s": "0 or null: off",
    "actor_rollout_ref.rollout.canary_top_k": "0: log-prob gaps only",
    "actor_rollout_ref.rollout.canary_floor": "0: the calibrated gap alone",
}


def check_consistency(cfg: DictConfig) -> list[str]:
    """All cross-key problems of a merged, resolved config (empty when it is valid)."""
    from agentrl.algos.batch_split import (
        BatchSplitError,
        micro_batch_per_worker,
        trajectories_per_worker,
    )

    problems = _choice_problems(cfg) + _bound_problems(cfg)
    if problems:  # the batch arithmetic below assumes sane values
        return problems
    workers = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    n = cfg.actor_rollout_ref.rollout.n
    actor = cfg.actor_rollout_ref.actor
    problems += _batch_problems("actor_rollout_ref.actor", actor.ppo_mini_batch_size,
                                actor.ppo_micro_batch_size, actor.ppo_micro_batch_size_per_gpu,
                                cfg.data.train_batch_size, n, workers)
    if _estimator_needs(cfg).critic:  # the critic trains only for an estimator that reads it
        critic = cfg.critic
        problems += _batch_problems("critic", critic.ppo_mini_batch_size,
                                    critic.ppo_micro_batch_size,
                                    critic.ppo_micro_batch_size_per_gpu,
                                    cfg.data.train_batch_size, n, workers)
    for prefix in ("actor_rollout_ref.ref", "actor_rollout_ref.rollout",
                   "actor_rollout_ref.teacher"):
        node = OmegaConf.select(cfg, prefix)
        try:
            micro_batch_per_worker(node.log_prob_micro_batch_size_per_gpu,
                                   node.log_prob_micro_batch_size, workers,
                                   f"{prefix}.log_prob_micro_batch_size")  # fmt: skip
        except BatchSplitError as err:
            problems.append(str(err))
    try:
        trajectories_per_worker(cfg.data.train_batch_size, n, workers, "data.train_batch_size")
    except BatchSplitError as err:
        problems.append(str(err))
    return (problems + _length_problems(cfg) + _misc_problems(cfg) + _judge_problems(cfg)
            + _distill_problems(cfg))


def _estimator_needs(cfg: DictConfig) -> EstimatorNeeds:
    """What `algorithm.adv_estimator` declared it needs where it is registered."""
    from agentrl.algos import estimator_needs

    return estimator_needs(cfg.algorithm.adv_estimator)


def _distill_problems(cfg: DictConfig) -> list[str]:
    """An estimator that reads a teacher (on-policy distillation) needs one, and a teacher
    is read by nothing else."""
    from agentrl.algos import ADV_ESTIMATORS, estimator_needs

    estimator = cfg.algorithm.adv_estimator
    distill = _estimator_needs(cfg).teacher
    node = cfg.actor_rollout_ref.teacher
    teacher = node.model.path or list(node.server_urls)
    if distill and not node.model.path:
        return [f"algorithm.adv_estimator={estimator} needs "
                "actor_rollout_ref.teacher.model.path (the teacher that scores the tokens; "
                "with teacher.server_urls, the model those servers serve: its tokenizer is "
                "checked against the student's)"]
    if teacher and not distill:
        readers = [name for name in ADV_ESTIMATORS.names() if estimator_needs(name).teacher]
        return [f"actor_rollout_ref.teacher is read only by "
                f"algorithm.adv_estimator={' or '.join(readers)} (it is "
                f"{estimator!r}): set one, or unset the teacher"]
    return []


def _judge_problems(cfg: DictConfig) -> list[str]:
    """An enabled LLM judge: its own fields, and what it cannot be combined with."""
    rm = cfg.reward_model
    if not rm.judge.enable:
        if rm.reward_manager == "judge":
            return ["reward_model.reward_manager=judge needs reward_model.judge.enable=true "
                    "(with its url and model)"]
        return []
    from agentrl.reward.judge import judge_problems

    problems = judge_problems(OmegaConf.to_container(rm.judge, resolve=True))
    if rm.reward_manager not in ("naive", "judge"):
        problems.append(f"reward_model.judge.enable replaces the reward manager; "
                        f"reward_model.reward_manager is {rm.reward_manager!r} (use naive)")
    if rm.enable:
        problems.append("reward_model.enable (a learned reward model) and reward_model.judge."
                        "enable cannot both score: set one of them")
    return problems


def _batch_problems(prefix: str, mini: int, micro_global: int | None,
                    micro_per_gpu: int | None, train_batch: int, n: int,
                    workers: int) -> list[str]:
    # the rules the workers apply to the sizes they train with
    from agentrl.algos.batch_split import (
        BatchSplitError,
        micro_batch_per_worker,
        mini_batch_per_worker,
    )

    mini_key = f"{prefix}.ppo_mini_batch_size"
    if mini > train_batch:
        return [f"{mini_key} ({mini}) is larger than data.train_batch_size ({train_batch})"]
    if train_batch % mini:
        return [f"{mini_key} ({mini}) must divide data.train_batch_size ({train_batch})"]
    try:
        per_worker = mini_batch_per_worker(mini, n, workers, mini_key)
        micro = micro_batch_per_worker(micro_per_gpu, micro_global, workers,
                                       f"{prefix}.ppo_micro_batch_size")  # fmt: skip
    except BatchSplitError as err:
        return [str(err)]
    if micro is None:
        return []
    micro_key = (f"{prefix}.ppo_micro_batch_size" if micro_per_gpu is None
                 else f"{prefix}.ppo_micro_batch_size_per_gpu")  # fmt: skip
    if micro > per_worker:
        return [f"{micro_key} ({micro} per worker) is larger than the mini-batch per "
                f"worker: {mini_key} x rollout.n / workers = {mini} x {n} / {workers} = "
                f"{per_worker}"]
    if per_worker % micro:
        return [f"{micro_key} ({micro} per worker) must divide the mini-batch per "
                f"worker: {mini_key} x rollout.n / workers = {mini} x {n} / {workers} = "
                f"{per_worker}"]
    return []


def _length_problems(cfg: DictConfig) -> list[str]:
    problems = []
    rollout = cfg.actor_rollout_ref.rollout
    max_len = rollout.max_model_len
    if max_len is not None and max_len <= rollout.prompt_length:
        problems.append(f"actor_rollout_ref.rollout.max_model_len ({max_len}) leaves no room for "
                        f"a response after rollout.prompt_length ({rollout.prompt_length})")
    seq_len = cfg.data.max_prompt_length + cfg.data.max_response_length
    actor = cfg.actor_rollout_ref.actor
    dynamic = actor.use_dynamic_bsz
    if dynamic is None:  # auto: by token budget unless a micro-batch size is set
        dynamic = actor.ppo_micro_batch_size_per_gpu is None and actor.ppo_micro_batch_size is None
    if dynamic and actor.ppo_max_token_len_per_gpu < seq_len:
        problems.append(
            f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu ({actor.ppo_max_token_len_per_gpu})"
            f" is smaller than one sequence: data.max_prompt_length + data.max_response_length "
            f"= {seq_len}")
    return problems


def _misc_problems(cfg: DictConfig) -> list[str]:
    problems = []
    if cfg.trainer.resume_mode == "resume_path" and not cfg.trainer.resume_from_path:
        problems.append("trainer.resume_mode is resume_path but trainer.resume_from_path is null")
    multi_turn = cfg.actor_rollout_ref.rollout.multi_turn
    if multi_turn.tool_record_mode is not None and not multi_turn.tool_record_path:
        problems.append("actor_rollout_ref.rollout.multi_turn.tool_record_mode is "
                        f"{multi_turn.tool_record_mode} but tool_record_path is null")
    if cfg.algorithm.filter_groups.enable and cfg.actor_rollout_ref.rollout.n < 2:
        problems.append("algorithm.filter_groups.enable needs actor_rollout_ref.rollout.n >= 2 "
                        f"(got {cfg.actor_rollout_ref.rollout.n}): a group of one sample "
                        "never varies")
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.agent_function and rollout.engine_workers > 1:
        problems.append("actor_rollout_ref.rollout.agent_function runs in the trainer's "
                        "gateway: engine_workers must be 1")
    if rollout.agent_function and rollout.deterministic:
        problems.append("actor_rollout_ref.rollout.deterministic cannot hold in agent mode "
                        "(agent_function): the agents' calls reach the engine as they come; "
                        "set it to null or false")
    if rollout.agent_function and rollout.multi_turn.interaction_config_path:
        problems.append("actor_rollout_ref.rollout.multi_turn.interaction_config_path is not "
                        "used in agent mode (agent_function): the agent writes the user turns")
    if rollout.engine_class and rollout.agent_function:
        problems.append("actor_rollout_ref.rollout.engine_class replaces the rollout engine; "
                        "agent mode (agent_function) runs no engine: set one of them")
    from agentrl.rollout.backends.registry import backend_plugin, backend_problems

    rollout_dict = OmegaConf.to_container(rollout, resolve=True)
    backend_issues = backend_problems(rollout_dict)
    problems += backend_issues
    if not backend_issues:  # a tied model on servers that keep a stale tied output layer
        from agentrl.rollout.backends.untie import tied_output_problems

        problems += tied_output_problems(backend_plugin(rollout.name), rollout_dict,
                                         cfg.actor_rollout_ref.model.path)  # fmt: skip
    if (not backend_issues and rollout.engine_workers > 1 and not rollout.server_urls
            and not backend_plugin(rollout.name).launches_servers):
        problems.append(
            f"actor_rollout_ref.rollout.engine_workers is {rollout.engine_workers} but "
            f"rollout.name is {rollout.name}: engine workers reach the inference servers over "
            "HTTP (sglang or vllm, or server_urls of agentrl serve); the hf engine lives in "
            "the trainer")
    problems += _mode_problems(cfg)
    val_kwargs = rollout.val_kwargs
    greedy = not val_kwargs.do_sample or val_kwargs.temperature == 0
    if _estimator_needs(cfg).greedy_baseline and (val_kwargs.n != 1 or not greedy):
        problems.append(
            f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} takes its greedy baseline "
            "with actor_rollout_ref.rollout.val_kwargs: set val_kwargs.n=1 and do_sample=false"
        )
    workers = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    if cfg.trainer.worker_group == "in_process" and workers != 1:
        problems.append(
            f"trainer.worker_group=in_process runs one worker but trainer.nnodes x "
            f"trainer.n_gpus_per_node = {workers}; use worker_group=ray or auto"
        )
    if cfg.reward_model.enable and not cfg.reward_model.model.path:
        problems.append("reward_model.enable is true but reward_model.model.path is null")
    if cfg.data.sampler.class_path:
        if not cfg.data.sampler.class_name:
            problems.append("data.sampler.class_path is set but data.sampler.class_name is null")
        if cfg.data.dataloader_num_workers != 0:
            problems.append(
                f"data.sampler needs data.dataloader_num_workers=0 (got "
                f"{cfg.data.dataloader_num_workers}): worker processes would hold copies of "
                "the sampler that its update() never reaches"
            )
    for key, (allowed, why) in NOT_YET.items():
        value = OmegaConf.select(cfg, key)
        if value not in allowed:
            problems.append(f"{key} is {value!r}: {why}; it must stay "
                            f"{' or '.join(repr(a) for a in allowed)}")
    return problems


def training_problems(cfg: DictConfig) -> list[str]:
    """What training needs beyond a valid config (`agentrl config` and `agentrl generate`
    take configs without them): the training data and the policy model."""
    problems = []
    if not cfg.data.train_files:
        problems.append("data.train_files must name the training parquet file(s)")
    if not cfg.actor_rollout_ref.model.path:
        problems.append("actor_rollout_ref.model.path must name the policy model")
    return problems


def _mode_problems(cfg: DictConfig) -> list[str]:
    """What the off-policy modes (trainer.mode one_step_off | async) cannot run with."""
    mode, staleness = cfg.trainer.mode, cfg.off_policy.max_staleness
    problems: list[str] = []
    if mode == "sync":
        return problems
    if mode == "one_step_off" and staleness != 1:
        problems.append(f"trainer.mode=one_step_off trains each batch one version behind: "
                        f"off_policy.max_staleness must be 1, got {staleness!r} (use mode=async)")
    rollout, algorithm = cfg.actor_rollout_ref.rollout, cfg.algorithm
    if rollout.skip_rollout:  # a replay is a recorded batch per step, not a stream
        problems.append(f"actor_rollout_ref.rollout.skip_rollout is not supported with "
                        f"trainer.mode={mode} yet")
    if rollout.deterministic:
        problems.append(f"actor_rollout_ref.rollout.deterministic cannot hold with "
                        f"trainer.mode={mode}: what is generated under which weights depends "
                        "on timing; set it to null or false")
    if rollout.engine_workers > 1:
        problems.append(f"actor_rollout_ref.rollout.engine_workers must be 1 with "
                        f"trainer.mode={mode} (its rollout runs in the trainer's process)")
    if _estimator_needs(cfg).greedy_baseline:
        problems.append(f"algorithm.adv_estimator={algorithm.adv_estimator} needs a greedy "
                        "rollout of each training batch under the current weights; use "
                        "trainer.mode=sync")
    if not rollout.calculate_log_probs:
        problems.append(f"trainer.mode={mode} needs actor_rollout_ref.rollout."
                        "calculate_log_probs=true (the off-policy correction and the "
                        "staleness bookkeeping read the rollout's log-probs)")
    return problems


def registry_choices() -> dict[str, tuple[str, ...]]:
    """Keys whose valid values are defined in other modules, read at validation time: the
    names in a registry (so that estimators, losses and reward managers a user registers
    are accepted too) and the tool-schema modes of ``agentrl.data.rows``."""
    from agentrl.algos import ADV_ESTIMATORS, POLICY_LOSSES
    from agentrl.algos.kl import KL_PENALTIES
    from agentrl.data.rows import TOOL_SCHEMAS_IN_PROMPT
    from agentrl.reward import REWARD_MANAGERS
    from agentrl.rollout.parsers import TOOL_PARSERS

    kl = KL_PENALTIES + tuple(f"{name}+" for name in KL_PENALTIES)
    return {
        "algorithm.adv_estimator": tuple(ADV_ESTIMATORS.names()),
        "actor_rollout_ref.actor.policy_loss.loss_mode": tuple(POLICY_LOSSES.names()),
        "reward_model.reward_manager": tuple(REWARD_MANAGERS.names()),
        "actor_rollout_ref.rollout.multi_turn.format": tuple(TOOL_PARSERS.names()),
        "actor_rollout_ref.rollout.multi_turn.tool_schemas_in_prompt": TOOL_SCHEMAS_IN_PROMPT,
        "data.tool_schemas_in_prompt": TOOL_SCHEMAS_IN_PROMPT,
        "actor_rollout_ref.actor.kl_loss_type": kl,
        "algorithm.kl_penalty": kl,
    }


def component_choices() -> dict[str, tuple[Any, ...]]:
    """Keys whose valid values the component that reads them
    defines, for components below the config layer (docs/architecture.md): one source, and
    the component checks the same list when built without a config. Components above it
    (the trainer) import their lists from here instead (`LOGGERS`)."""
    from agentrl.algos.core import LOSS_AGG_MODES
    from agentrl.algos.kl import KL_CONTROLLERS
    from agentrl.algos.rollout_correction import RATIO_LEVELS
    from agentrl.rollout.backends.base import LOAD_BALANCE
    from agentrl.rollout.backends.canary import CANARY_MODES, ON_DIVERGENCE
    from agentrl.rollout.backends.verify import VERIFY_MODES
    from agentrl.rollout.check_offload import OFFLOAD_SETTINGS
    from agentrl.rollout.token_check import SANITY_CHECK_MODES
    from agentrl.utils.infra import ON_INFRA_ERROR

    return {
        "actor_rollout_ref.actor.policy_loss.rollout_is": (None, *RATIO_LEVELS),
        "actor_rollout_ref.actor.policy_loss.rollout_rs": (None, *RATIO_LEVELS),
        "actor_rollout_ref.rollout.verify_weights": VERIFY_MODES,
        "actor_rollout_ref.rollout.canary": CANARY_MODES,
        "actor_rollout_ref.rollout.on_divergence": ON_DIVERGENCE,
        "actor_rollout_ref.actor.loss_agg_mode": LOSS_AGG_MODES,
        "critic.loss_agg_mode": LOSS_AGG_MODES,
        "algorithm.kl_ctrl.type": KL_CONTROLLERS,
        "actor_rollout_ref.rollout.load_balance": LOAD_BALANCE,
        "actor_rollout_ref.rollout.on_infra_error": ON_INFRA_ERROR,
        "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode": SANITY_CHECK_MODES,
        "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_offload": OFFLOAD_SETTINGS,
    }


def _choice_problems(cfg: DictConfig) -> list[str]:
    problems = []
    for key, allowed in {**CHOICES, **component_choices(), **registry_choices()}.items():
        value = OmegaConf.select(cfg, key)
        if value not in allowed:
            problems.append(f"{key} is {value!r}; choose one of {_show(allowed)}")
    for key, allowed in LIST_CHOICES.items():
        bad = [v for v in OmegaConf.select(cfg, key) if v not in allowed]
        if bad:
            problems.append(f"{key} has {_show(bad)}; each must be one of {_show(allowed)}")
    return problems


# key -> (lowest allowed, highest allowed, the highest is excluded)
FRACTIONS: dict[str, tuple[float, float, bool]] = {
    "actor_rollout_ref.rollout.over_sample_rate": (0.0, 1.0, True),
}


def _bound_problems(cfg: DictConfig) -> list[str]:
    problems = []
    for key in POSITIVE:
        value = OmegaConf.select(cfg, key)
        if value is not None and value < 1:
            problems.append(f"{key} must be >= 1, got {value}")
    for key, zero in NON_NEGATIVE.items():
        value = OmegaConf.select(cfg, key)
        if value is not None and value < 0:
            problems.append(f"{key} must be >= 0 ({zero}), got {value}")
    for key, (low, high, open_high) in FRACTIONS.items():
        value = OmegaConf.select(cfg, key)
        if value < low or value > high or (open_high and value == high):
            problems.append(f"{key} must be in [{low}, {high}{')' if open_high else ']'}, "
                            f"got {value}")
    return problems


def _show(values: Any) -> str:
    return ", ".join("null" if v is None else str(v) for v in values)
