"""Each component receives one typed settings object (issue 57 item 2): below the trainer's
assembly no parameter named `config`, `cfg`, `*_config` or `*_cfg` is typed `Any` or
`DictConfig` (or left untyped), and no module re-wraps a config section as a `PlainConfig`
or a plain dict (agentrl/utils/plain_config.py).

ASSEMBLY lists where the validated tree is legitimately read whole: the config layer, the
trainer's assembly, the commands above it, and the settings builders (`from_config`). LEFT is
what has not been typed yet: it only shrinks. The test fails on a finding in neither list
(type the new parameter: a frozen settings dataclass built once, as
agentrl/rollout/engine_config.py's `RolloutConfig`) and on a LEFT entry that no longer
matches (remove it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "agentrl"
LOOSE = {"Any", "typing.Any", "DictConfig", "omegaconf.DictConfig"}
REWRAPS = {"PlainConfig", "plain_config", "plain_dict"}

# a module (path) or a function (path::qualname): why it reads the tree itself
ASSEMBLY = {
    "agentrl/config/": "the config layer: loads, normalises and validates the tree",
    "agentrl/trainer/main.py": "the trainer's entry point: the whole validated tree",
    "agentrl/trainer/ppo_trainer.py": "the trainer's assembly",
    "agentrl/trainer/off_policy.py::OffPolicyTrainer.__init__": "the trainer's assembly",
    "agentrl/trainer/worker_setup.py": "the trainer's assembly: builds the workers",
    "agentrl/trainer/preflight.py": "checks the run's inputs before any component starts",
    "agentrl/trainer/step_context.py::StepContext.of": "builds the step's context once",
    "agentrl/trainer/export.py::load_actor": "a command: a run's saved tree",
    "agentrl/trainer/tracking.py::Tracking.__init__": "the whole tree, logged as data",
    "agentrl/trainer/checkpointing.py::save_resolved_config": "the whole tree, saved as data",
    "agentrl/generate.py": "`agentrl generate`: a command's assembly",
    "agentrl/quickstart/": "a task package, above the trainer",
    "agentrl/utils/plain_config.py": "the helpers themselves",
}

# not typed yet (issue 57 item 2, steps 2-4): remove an entry when its parameter is typed
LEFT = {
    # step 2: the engine, the sharded engine and the backend plugins read the rollout section
    "agentrl/rollout/engine.py::AsyncRolloutEngine.__init__(config)",
    "agentrl/rollout/sharded.py::EngineWorker.__init__(rollout_config)",
    "agentrl/rollout/sharded.py::ShardedRolloutEngine.__init__(rollout_config)",
    "agentrl/rollout/backends/factory.py::create_backend(rollout_config)",
    "agentrl/rollout/engine.py: plain_config",
    "agentrl/rollout/backends/factory.py: plain_dict",
    # step 3: the actor (actor_rollout_ref.actor, its optim and fsdp), critic, reward model
    "agentrl/workers/actor.py::ActorRolloutRefWorker.__init__(config)",
    "agentrl/workers/critic.py::CriticWorker.__init__(config)",
    "agentrl/workers/critic.py::_with_path(model_cfg)",
    "agentrl/workers/fsdp.py::load_model(model_cfg)",
    "agentrl/workers/fsdp.py::mixed_precision_policy(fsdp_cfg)",
    "agentrl/workers/fsdp.py::build_sharded_model(model_cfg)",
    "agentrl/workers/fsdp.py::build_sharded_model(fsdp_cfg)",
    "agentrl/workers/lora.py::apply_lora(model_cfg)",
    "agentrl/workers/reward_model.py::_ModelConfig.__init__(cfg)",
    "agentrl/workers/reward_model.py::RewardModelWorker.__init__(config)",
    "agentrl/algos/policy_loss.py::_open(config)",
    "agentrl/algos/policy_loss.py::compute_policy_loss_vanilla(config)",
    "agentrl/algos/policy_loss.py::compute_policy_loss_gspo(config)",
    "agentrl/algos/policy_loss.py::compute_policy_loss_cispo(config)",
    "agentrl/algos/policy_loss.py::compute_policy_loss_gpg(config)",
    "agentrl/algos/rollout_correction.py::policy_loss_settings(config)",
    # step 4: the trainer section, the algorithm section, data and reward
    "agentrl/algos/advantage.py::compute_gae_advantage_return(config)",
    "agentrl/algos/advantage.py::compute_grpo_outcome_advantage(config)",
    "agentrl/algos/advantage.py::compute_rloo_outcome_advantage(config)",
    "agentrl/algos/advantage.py::compute_opo_outcome_advantage(config)",
    "agentrl/algos/advantage.py::compute_gpg_outcome_advantage(config)",
    "agentrl/algos/advantage.py::compute_grpo_passk_outcome_advantage(config)",
    "agentrl/algos/advantage.py::compute_reinforce_plus_plus_outcome_advantage(config)",
    "agentrl/algos/advantage.py::compute_reinforce_plus_plus_baseline_outcome_advantage(config)",
    "agentrl/algos/advantage.py::compute_remax_outcome_advantage(config)",
    "agentrl/algos/advantage.py::compute_on_policy_distill_advantage(config)",
    "agentrl/algos/advantage.py::compute_advantage(config)",
    "agentrl/algos/kl.py::get_kl_controller(kl_ctrl_config)",
    "agentrl/data/loader.py::create_rl_dataset(data_config)",
    "agentrl/data/loader.py::create_train_dataloader(data_config)",
    "agentrl/data/loader.py::create_val_dataloader(data_config)",
    "agentrl/data/rl_dataset.py::RLHFDataset.__init__(config)",
    "agentrl/data/sampler.py::AbstractSampler.__init__(data_config)",
    "agentrl/data/sampler.py::create_sampler(data_config)",
    "agentrl/reward/loader.py::get_custom_reward_fn(custom_reward_function_config)",
    "agentrl/reward/loader.py::_default_score_fn(reward_model_config)",
    "agentrl/reward/loader.py::load_reward_manager(reward_model_config)",
    "agentrl/reward/loader.py::load_reward_manager(custom_reward_function_config)",
    "agentrl/reward/loader.py: plain_dict",
    "agentrl/trainer/batch_source.py::BatchSource.start_workers(config)",
    "agentrl/trainer/batch_source.py::BatchSource.start_workers(worker_config)",
    "agentrl/trainer/off_policy.py::server_host(config)",
    "agentrl/trainer/off_policy.py::ProducerBatchSource.__init__(config)",
    "agentrl/trainer/off_policy.py::ProducerBatchSource.start_workers(config)",
    "agentrl/trainer/off_policy.py::ProducerBatchSource.start_workers(worker_config)",
    "agentrl/trainer/off_policy.py::ProducerBatchSource.workers_config(worker_config)",
    "agentrl/trainer/replay.py::generate_or_replay(rollout_cfg)",
    "agentrl/trainer/tracking.py: plain_dict",
}


def _is_config_name(name: str) -> bool:
    return name in ("config", "cfg") or name.endswith(("_config", "_cfg"))


def _loose(annotation: ast.expr | None) -> bool:
    """Untyped, or a union with `Any` or `DictConfig` at its top."""
    if annotation is None:
        return True
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    parts: list[ast.expr] = []
    pending = [annotation]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            pending += [node.left, node.right]
        else:
            parts.append(node)
    return any(ast.unparse(p) in LOOSE for p in parts)


def parameter_findings(path: str, source: str) -> Iterator[tuple[str, str]]:
    """(qualname, parameter) of each loosely typed config parameter in `source`."""
    def visit(node: ast.AST, scope: list[str]) -> Iterator[tuple[str, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, [*scope, child.name])
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = child.args
                for arg in args.posonlyargs + args.args + args.kwonlyargs:
                    if _is_config_name(arg.arg) and _loose(arg.annotation):
                        yield ".".join([*scope, child.name]), arg.arg
                yield from visit(child, [*scope, child.name])
            else:
                yield from visit(child, scope)

    yield from visit(ast.parse(source, filename=path), [])


def rewrap_findings(source: str) -> set[str]:
    """The re-wrapping helpers (REWRAPS) a module imports."""
    return {alias.name for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.module == "agentrl.utils.plain_config"
            for alias in node.names if alias.name in REWRAPS}  # fmt: skip


def _assembly(path: str, qualname: str | None = None) -> bool:
    return any(path.startswith(where) if where.endswith("/") else where in (
        path, f"{path}::{qualname}") for where in ASSEMBLY)  # fmt: skip


def findings() -> set[str]:
    found = set()
    for file in sorted(PACKAGE.rglob("*.py")):
        path = file.relative_to(REPO).as_posix()
        source = file.read_text()
        for qualname, param in parameter_findings(path, source):
            if qualname.split(".")[-1] != "from_config" and not _assembly(path, qualname):
                found.add(f"{path}::{qualname}({param})")
        if not _assembly(path):
            found |= {f"{path}: {name}" for name in rewrap_findings(source)}
    return found


def test_no_new_loosely_typed_config_parameter_or_rewrapped_section():
    found = findings()
    new = sorted(found - LEFT)
    assert not new, ("config parameters typed Any/DictConfig (or untyped), or sections "
                     "re-wrapped, below the trainer's assembly: give the component a typed "
                     "settings object (agentrl/rollout/engine_config.py's pattern):\n"
                     + "\n".join(new))
    stale = sorted(LEFT - found)
    assert not stale, "typed now: remove from LEFT in tests/test_config_parameters.py:\n" + (
        "\n".join(stale))


def test_the_scan_finds_what_it_names():
    source = '''
from typing import Any
from omegaconf import DictConfig
from agentrl.utils.plain_config import PlainConfig, plain_container
def f(config: Any, cfg, optim_cfg: DictConfig | None, x: Any, settings: Any) -> None: ...
class Worker:
    def __init__(self, rollout_config: "Any", data_config: dict, model_config: Typed) -> None:
        def inner(teacher_cfg: Mapping[str, Any]) -> None: ...
'''
    assert sorted(parameter_findings("m.py", source)) == [
        ("Worker.__init__", "rollout_config"), ("f", "cfg"), ("f", "config"),
        ("f", "optim_cfg")]
    assert rewrap_findings(source) == {"PlainConfig"}
