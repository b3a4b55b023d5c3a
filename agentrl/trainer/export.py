"""`agentrl export`: a sharded checkpoint as a Hugging Face model folder, with the tokenizer.

    agentrl export CHECKPOINT_DIR --out DIR [--adapter] [--model BASE_DIR] [--config FILE]

verl's ``model_merger`` for agentrl's checkpoints (agentrl/trainer/checkpointing.py):
CHECKPOINT_DIR is a run's checkpoint root (``trainer.default_local_dir``: its latest step
is taken), one ``global_step_N`` directory, or its ``actor/``. The actor's sharded model
(``actor/dcp``, FSDP2 shards from any number of ranks) is loaded into the run's model on the
CPU, one process, and written with ``save_pretrained`` plus the run's tokenizer, so
``AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)``
load it. The model is rebuilt from the run's resolved config (``config.yaml`` beside the
checkpoints, written by ``agentrl train``; ``--config`` names another):
``actor_rollout_ref.model`` (the base model, ``--model`` if it moved) and its LoRA settings.
A LoRA run is written merged (``W + B @ A * alpha / r``, a plain model; its adapters also
in ``DIR/lora_adapter/``), or with ``--adapter`` as the peft adapter alone. A bad
CHECKPOINT_DIR or ``--out`` is one message and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentrl.trainer.checkpointing import LATEST_FILE, CheckpointError, latest_checkpoint, step_of
from agentrl.utils.command import report_error
from agentrl.utils.out_dir import check_writable_dir

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"  # the resolved config agentrl train writes in the checkpoint root


class ExportError(ValueError):
    """CHECKPOINT_DIR, --out or the run's config cannot give an export (names which)."""


@dataclass(frozen=True)
class ActorCheckpoint:
    """Where one step's actor checkpoint is, and the run root above it."""

    actor_dir: Path  # global_step_N/actor
    step: int
    root: Path


def find_actor_checkpoint(path: str | Path) -> ActorCheckpoint:
    """The actor checkpoint that CHECKPOINT_DIR names (see the module docstring)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ExportError(f"checkpoint directory {path} does not exist")
    if not path.is_dir():
        raise ExportError(f"{path} is a file, not a checkpoint directory")
    if (path / "dcp").is_dir() and _is_step_dir(path.parent):  # global_step_N/actor
        step_path = path.parent
    elif _is_step_dir(path):
        step_path = path
    else:
        step_path = _latest_step(path)
    actor = step_path / "actor"
    if not (actor / "dcp").is_dir():
        raise ExportError(f"{step_path} holds no sharded actor model ({actor / 'dcp'} is "
                          "missing): not a checkpoint of agentrl train")
    return ActorCheckpoint(actor, step_of(step_path), step_path.parent)


def _is_step_dir(path: Path) -> bool:
    try:
        step_of(path)
    except CheckpointError:
        return False
    return True


def _latest_step(root: Path) -> Path:
    """The step the latest marker names, else the highest ``global_step_N``."""
    try:
        latest = latest_checkpoint(root)
    except CheckpointError as err:
        raise ExportError(str(err)) from err
    if latest is not None:
        return latest
    steps = [p for p in root.iterdir() if p.is_dir() and _is_step_dir(p)]
    if not steps:
        raise ExportError(f"{root} is not a checkpoint directory: it holds no global_step_<N> "
                          f"directory and no {LATEST_FILE} (give a run's "
                          "trainer.default_local_dir, or one global_step_<N> in it)")
    return max(steps, key=step_of)


def run_config(checkpoint: ActorCheckpoint, config_file: str | Path | None) -> DictConfig:
    """The run's resolved config: ``--config``, else ``config.yaml`` in the run root."""
    path = Path(config_file) if config_file else checkpoint.root / CONFIG_FILE
    if not path.is_file():
        raise ExportError(f"no run config at {path}: agentrl train writes {CONFIG_FILE} beside "
                          "the checkpoints; give the run's resolved config with --config")
    config = OmegaConf.load(path)
    if OmegaConf.select(config, "actor_rollout_ref.model.path") is None:
        raise ExportError(f"{path} has no actor_rollout_ref.model.path (not a run's config)")
    return config


def check_out_dir(out: str | Path) -> Path:
    """``--out``: a new or empty directory."""
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} is a file; give a directory to write the model into")
    if out.is_dir() and any(out.iterdir()):
        raise ExportError(f"--out {out} is not empty; give a new or empty directory")
    try:
        check_writable_dir(out, "--out")
    except ValueError as err:
        raise ExportError(str(err)) from err
    return out


def load_actor(checkpoint: ActorCheckpoint, config: DictConfig, model_path: str | None = None
               ) -> tuple[Any, Any]:  # fmt: skip
    """The run's actor model with the checkpoint's weights (LoRA: wrapped in its adapters),
    on the CPU, and the run's tokenizer."""
    from transformers import AutoModelForCausalLM

    from agentrl.models.tokenizer import load_tokenizer
    from agentrl.workers.checkpoint import load_checkpoint
    from agentrl.workers.fsdp import load_model
    from agentrl.workers.lora import apply_lora

    model_cfg = OmegaConf.merge(config.actor_rollout_ref.model,
                                {"enable_gradient_checkpointing": False})
    if model_path is not None:
        model_cfg.path = str(model_path)
    if not Path(str(model_cfg.path)).expanduser().exists():
        raise ExportError(f"the run's base model {model_cfg.path} (actor_rollout_ref.model.path) "
                          "is not on this machine; give its directory with --model")
    if not (Path(str(model_cfg.path)).expanduser() / "config.json").is_file():
        raise ExportError(f"the base model {model_cfg.path} is not a Hugging Face model "
                          "directory (no config.json); give the run's with --model")
    dtype = config.actor_rollout_ref.actor.fsdp_config.model_dtype
    model = load_model(model_cfg, AutoModelForCausalLM, dtype)
    if int(model_cfg.lora_rank) > 0:
        model = apply_lora(model, model_cfg)
    try:
        with warnings.catch_warnings():  # one process, no group: dcp says so, expected here
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            load_checkpoint(checkpoint.actor_dir, model, contents=("model",))
    except FileNotFoundError as err:  # saved without `model` in save_contents
        raise ExportError(str(err)) from err
    model.eval()
    tokenizer = load_tokenizer(str(model_cfg.path),
                               trust_remote_code=bool(model_cfg.trust_remote_code),
                               chat_template=model_cfg.custom_chat_template)
    return model, tokenizer


def export(checkpoint_dir: str | Path, out: str | Path, adapter: bool = False,
           model_path: str | None = None, config_file: str | Path | None = None) -> Path:
    """Write the checkpoint CHECKPOINT_DIR names as a Hugging Face folder ``out``; returns it."""
    from agentrl.workers.checkpoint import export_hf
    from agentrl.workers.lora import full_state_dict_of_adapters, is_lora

    checkpoint = find_actor_checkpoint(checkpoint_dir)
    out = check_out_dir(out)
    config = run_config(checkpoint, config_file)
    if adapter and int(config.actor_rollout_ref.model.lora_rank) <= 0:
        raise ExportError("--adapter: the run trained no LoRA adapters "
                          "(actor_rollout_ref.model.lora_rank is 0); export the full model")
    model, tokenizer = load_actor(checkpoint, config, model_path)
    if adapter:
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out, state_dict=full_state_dict_of_adapters(model))
        tokenizer.save_pretrained(out)
    else:
        export_hf(out, model, tokenizer)  # LoRA: merged, the adapters in lora_adapter/
    what = "LoRA adapter" if adapter else ("merged LoRA model" if is_lora(model) else "model")
    logger.info("exported step %d of %s as a Hugging Face %s: %s", checkpoint.step,
                checkpoint.root, what, out)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint_dir", metavar="CHECKPOINT_DIR",
                        help="a run's checkpoint root (its latest step), a global_step_N "
                             "directory, or its actor/")
    parser.add_argument("--out", required=True, help="the Hugging Face folder to write (new "
                                                     "or empty)")
    parser.add_argument("--adapter", action="store_true",
                        help="LoRA runs: write the peft adapter only (default: merged model)")
    parser.add_argument("--model", default=None,
                        help="the base model directory, when the run's "
                             "actor_rollout_ref.model.path moved")
    parser.add_argument("--config", default=None,
                        help="the run's resolved config (default: config.yaml in the run root)")


def run(args: argparse.Namespace) -> int:
    try:
        out = export(args.checkpoint_dir, args.out, adapter=args.adapter, model_path=args.model,
                     config_file=args.config)
    except ExportError as err:
        return report_error(err)
    sys.stdout.write(f"{out}\n")
    return 0


if __name__ == "__main__":
    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "export"))
