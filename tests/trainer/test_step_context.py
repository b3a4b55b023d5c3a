"""The stages receive what they use: no function of a trainer stage module takes the
trainer; `StepContext` holds the config sections, not the tree, and cannot be changed."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import agentrl.trainer
from agentrl.trainer.step_context import Models, StepContext

TRAINER_DIR = Path(agentrl.trainer.__file__).parent
TRAINER_CLASSES = {"PPOTrainer", "OffPolicyTrainer"}


def _annotation_names(node: ast.expr | None) -> set[str]:
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # "PPOTrainer"
        return _annotation_names(ast.parse(node.value, mode="eval").body)
    return {n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(node) if isinstance(n, ast.Name | ast.Attribute)}  # fmt: skip


def trainer_parameters(source: str) -> list[str]:
    """`function(param)` for each parameter named `trainer` or annotated with a trainer class."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is None:
                continue
            if arg.arg == "trainer" or _annotation_names(arg.annotation) & TRAINER_CLASSES:
                found.append(f"{getattr(node, 'name', 'lambda')}({arg.arg})")
    return found


def test_the_scan_finds_a_trainer_parameter_by_name_and_by_annotation():
    source = ("def a(trainer, step): ...\n"
              "def b(x: 'PPOTrainer'): ...\n"
              "class S:\n    def c(self, t: agentrl.trainer.PPOTrainer | None): ...\n"
              "def d(ctx: StepContext, trainer_cfg: Any): ...\n")  # fmt: skip
    assert trainer_parameters(source) == ["a(trainer)", "b(x)", "c(t)"]


def test_no_function_of_the_trainer_package_takes_the_trainer():
    """Every module of agentrl/trainer/ (the stages, and the trainer's own methods, which
    take `self`): a stage gets a `StepContext` or the objects it uses."""
    offenders = {
        path.name: found
        for path in sorted(TRAINER_DIR.glob("*.py"))
        if (found := trainer_parameters(path.read_text()))
    }
    assert offenders == {}
    assert {"batch_source.py", "off_policy.py", "policy_step.py"} <= {
        path.name for path in TRAINER_DIR.glob("*.py")
    }  # the scan reads the stage modules


def _context(**changes):
    config = OmegaConf.create({
        "algorithm": {"adv_estimator": "grpo"}, "data": {"train_batch_size": 4},
        "actor_rollout_ref": {"rollout": {"temperature": 0.7, "n": 2},
                              "actor": {"ppo_epochs": 1, "fuse_old_log_prob": True,
                                        "segment_weighting": "episode",
                                        "ppo_mini_batch_size": 2}},
        "trainer": {"seed": 1},
    })  # fmt: skip
    fields = dict(reward_fn="reward", kl_ctrl=None, trace="trace", watchdog="watchdog",
                  stage="stage", n_workers=2, total_training_steps=3) | changes  # fmt: skip
    return StepContext.of(config, Models(actor_rollout="actor"), **fields)


def test_the_context_holds_the_sections_the_stages_read():
    ctx = _context()
    assert ctx.rollout.temperature == 0.7
    assert ctx.data.train_batch_size == 4
    assert ctx.algorithm.adv_estimator == "grpo"
    assert ctx.trainer_cfg.seed == 1 and ctx.n_workers == 2
    assert ctx.models.actor_rollout == "actor" and ctx.total_training_steps == 3
    assert ctx.fuse_old_log_prob  # actor.fuse_old_log_prob with one PPO epoch
    assert ctx.segment_weighting == "episode"  # actor.segment_weighting
    assert ctx.row_multiple == 4  # the global mini-batch in rows: 2 prompts x n = 2
    assert not hasattr(ctx, "config") and not hasattr(ctx, "trainer")


def test_the_context_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _context().total_training_steps = 4
