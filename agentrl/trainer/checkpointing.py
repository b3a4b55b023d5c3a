"""The trainer's checkpoint directory: layout, the latest-step marker, resume and rotation.

verl's layout, under ``trainer.default_local_dir``::

    global_step_10/actor/     ActorRolloutRefWorker.save_checkpoint (sharded model, optimizer,
                              scheduler, RNG; see docs/workers.md); the run's last one also
                              actor/huggingface/ (``trainer.save_hf_model_at_end``)
    global_step_10/critic/    CriticWorker.save_checkpoint (PPO with GAE only)
    global_step_10/data.pt    the driver's state: data loader position, global step, KL coef
    latest_checkpointed_iteration.txt   "10", written last, so it names a complete checkpoint

A step is written under ``global_step_10.partial`` and renamed to ``global_step_10`` once
every part is on disk; the marker moves after the rename. A process killed in the middle
of a save leaves only a ``.partial`` directory, which nothing resumes from and the next save
removes: the previous checkpoint stays the one that resumes.

``trainer.resume_mode``: ``auto`` resumes from the step the marker names (a fresh start when
there is none), ``disable`` always starts fresh, ``resume_path`` resumes from
``trainer.resume_from_path`` (a ``global_step_N`` directory) and fails when it is not one.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from agentrl.trainer.trainer_settings import CheckpointSettings, refuse_raw

logger = logging.getLogger(__name__)

LATEST_FILE = "latest_checkpointed_iteration.txt"
DATA_FILE = "data.pt"
PARTIAL_SUFFIX = ".partial"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint to resume from is missing or incomplete (the message names the path)."""


def step_dir(root: str | Path, step: int) -> Path:
    """``root/global_step_{step}``."""
    return Path(root) / f"global_step_{step}"


def partial_dir(root: str | Path, step: int) -> Path:
    """Where step ``step`` is written before it is complete."""
    return Path(root) / f"global_step_{step}{PARTIAL_SUFFIX}"


def remove_partial(root: str | Path) -> list[Path]:
    """Delete the ``.partial`` directories an interrupted save left; returns them."""
    removed = sorted(Path(root).glob(f"global_step_*{PARTIAL_SUFFIX}"))
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    if removed:
        logger.warning("removed incomplete checkpoints of an interrupted save: %s",
                       ", ".join(str(p) for p in removed))
    return removed


def commit(root: str | Path, step: int) -> Path:
    """Rename the complete ``.partial`` directory of ``step`` to ``global_step_{step}``
    (replacing an older one of the same step), then point the latest marker at it."""
    final = step_dir(root, step)
    if final.exists():  # the same step saved again (a resumed run): replace it whole
        old = final.with_name(final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    partial_dir(root, step).rename(final)
    mark_latest(root, step)
    return final


def step_of(path: str | Path) -> int:
    """N of a ``global_step_N`` directory; CheckpointError for any other name."""
    match = _STEP_DIR.match(Path(path).name)
    if match is None:
        raise CheckpointError(
            f"{path} is not a checkpoint directory: its name must be global_step_<N>"
        )
    return int(match.group(1))


def latest_checkpoint(root: str | Path) -> Path | None:
    """The directory ``latest_checkpointed_iteration.txt`` names, or None when there is none."""
    marker = Path(root) / LATEST_FILE
    if not marker.is_file():
        return None
    text = marker.read_text().strip()
    if not text.isdigit():
        raise CheckpointError(f"{marker} should hold a step number, found {text!r}")
    path = step_dir(root, int(text))
    if not path.is_dir():
        raise CheckpointError(f"{marker} names step {text} but {path} does not exist")
    return path


def resume_path(settings: CheckpointSettings) -> Path | None:
    """The checkpoint to resume from under ``trainer.resume_mode`` (None: start fresh)."""
    refuse_raw(settings, CheckpointSettings, "resume_path")
    mode = settings.resume_mode
    if mode == "disable":
        return None
    if mode == "auto":
        return latest_checkpoint(settings.default_local_dir)
    if mode != "resume_path":
        raise ValueError(f"trainer.resume_mode is {mode!r}; choose auto, disable or resume_path")
    path = Path(str(settings.resume_from_path))
    step_of(path)
    if not path.is_dir():
        raise CheckpointError(f"trainer.resume_from_path {path} does not exist")
    return path


def check_complete(path: Path, parts: tuple[str, ...]) -> None:
    """Raise CheckpointError naming what ``path`` lacks of ``parts`` (dirs) and data.pt."""
    missing = [p for p in parts if not (path / p).is_dir()]
    if not (path / DATA_FILE).is_file():
        missing.append(DATA_FILE)
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete: missing {', '.join(missing)}")


def save_trainer_state(path: Path, state: dict[str, Any]) -> None:
    """Write the driver's state as ``path/data.pt``."""
    path.mkdir(parents=True, exist_ok=True)
    torch.save(state, path / DATA_FILE)


def load_trainer_state(path: Path) -> dict[str, Any]:
    return torch.load(path / DATA_FILE, weights_only=False)


def mark_latest(root: str | Path, step: int) -> None:
    """Point ``latest_checkpointed_iteration.txt`` at ``step`` (atomically: write, rename)."""
    root = Path(root)
    tmp = root / f"{LATEST_FILE}.tmp"
    tmp.write_text(str(step))
    tmp.replace(root / LATEST_FILE)


def rotate(root: str | Path, part: str, keep: int | None) -> list[Path]:
    """Delete ``global_step_*/part`` of all but the newest ``keep`` steps (None: keep all);
    a step directory left without actor and critic goes entirely. Returns what was deleted."""
    if keep is None or keep < 1:
        return []
    root = Path(root)
    steps = sorted((step_of(p), p) for p in root.glob("global_step_*") if _STEP_DIR.match(p.name))
    holding = [(s, p) for s, p in steps if (p / part).is_dir()]
    removed = []
    for _, path in holding[: max(len(holding) - keep, 0)]:
        shutil.rmtree(path / part)
        removed.append(path / part)
        if not (path / "actor").exists() and not (path / "critic").exists():
            shutil.rmtree(path)
    if removed:
        logger.info("removed old checkpoints: %s", ", ".join(str(p) for p in removed))
    return removed


def save(root: Path, step: int, models: Any, state: dict[str, Any],
         settings: CheckpointSettings, final: bool = False) -> Path:  # fmt: skip
    """Write step ``step``: ``global_step_N/{actor,critic,data.pt}`` under a ``.partial`` name
    until complete (``models``: the run's worker groups, ``update.Models``; ``state``: the
    driver's share), mark it latest, rotate old ones per ``max_{actor,critic}_ckpt_to_keep``.
    ``final`` (the run's last checkpoint) with ``trainer.save_hf_model_at_end``: the actor's
    part holds ``huggingface/`` too, whatever ``save_contents`` says."""
    remove_partial(root)
    partial = partial_dir(root, step)
    partial.mkdir(parents=True, exist_ok=True)
    hf = {"hf_model": True} if final and settings.save_hf_model_at_end else {}
    models.actor_rollout.save_checkpoint(str(partial / "actor"), global_step=step, **hf)
    if models.critic is not None:
        models.critic.save_checkpoint(str(partial / "critic"), global_step=step)
    save_trainer_state(partial, state)
    path = commit(root, step)
    rotate(root, "actor", settings.max_actor_ckpt_to_keep)
    rotate(root, "critic", settings.max_critic_ckpt_to_keep)
    logger.info("saved checkpoint %s", path)
    return path


def restore(path: Path, models: Any) -> dict[str, Any]:
    """Load the worker states of checkpoint ``path`` into ``models`` (after checking it is
    complete); returns the driver's state (``data.pt``)."""
    check_complete(path, ("actor", "critic") if models.critic is not None else ("actor",))
    models.actor_rollout.load_checkpoint(str(path.resolve() / "actor"))
    if models.critic is not None:
        models.critic.load_checkpoint(str(path.resolve() / "critic"))
    return load_trainer_state(path)


def save_resolved_config(config: Any, root: Path) -> None:
    """Write the resolved config to ``root/config.yaml`` (``trainer.default_local_dir``), the
    dump directories made absolute, so ``agentrl report`` finds them from anywhere."""
    from omegaconf import OmegaConf

    tree = OmegaConf.to_container(config, resolve=True)
    for key in ("rollout_data_dir", "validation_data_dir"):
        if tree["trainer"][key]:
            tree["trainer"][key] = str(Path(tree["trainer"][key]).resolve())
    root.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(tree), root / "config.yaml")
