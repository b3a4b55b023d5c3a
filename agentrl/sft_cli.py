"""`agentrl sft`: supervised fine-tuning on multi-turn tool-use conversations.

    agentrl sft --model MODEL_DIR --data sft.jsonl --out-dir outputs/sft [--epochs 3] ...
    agentrl sft --config sft.yaml [--lr 1e-4]        # flags override the file
    agentrl sft --model MODEL_DIR --trajectories sessions.jsonl --out-dir outputs/sft

`--trajectories` trains on recorded agent sessions in the open trajectory format
(docs/trajectories.md; `agentrl trajectories export` writes them from a run): each segment's
token ids as recorded, the loss on its loss-mask-1 tokens only. With `--data` too, both train.
A file that does not match the format is refused before the model loads (one line, exit 2).

The YAML file holds the same settings as the flags, by `run_sft`'s argument names:

    model_path: outputs/quickstart/model_init
    data: outputs/quickstart/data/sft_train.jsonl   # jsonl or parquet: messages (+ tools)
    output_dir: outputs/sft
    epochs: 3
    lr: 3.0e-3
    batch_size: 8
    max_length: 1024
    seed: 0
    truncation: error                               # error | right | drop

The metrics (`loss_before`, `loss_after`, `epoch_losses`, ...) are written to
`OUTPUT_DIR/sft_metrics.json`. See agentrl/trainer/sft.py.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import sys
from pathlib import Path
from typing import Any

import yaml

logger = logging.getLogger(__name__)

# flag name -> run_sft argument
FLAGS = {
    "model": "model_path",
    "data": "data",
    "out_dir": "output_dir",
    "epochs": "epochs",
    "lr": "lr",
    "batch_size": "batch_size",
    "max_length": "max_length",
    "seed": "seed",
    "weight_decay": "weight_decay",
    "truncation": "truncation",
    "trajectories": "trajectories",
}
REQUIRED = ("model_path", "output_dir")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="YAML file with run_sft settings")
    parser.add_argument("--model", default=None, help="HF model directory to fine-tune")
    parser.add_argument("--data", default=None, help="jsonl/parquet of conversations")
    parser.add_argument("--trajectories", default=None, metavar="FILE.jsonl",
                        help="recorded sessions in the trajectory format (docs/trajectories.md)")
    parser.add_argument("--out-dir", default=None, help="where the fine-tuned model goes")
    parser.add_argument("--epochs", type=int, default=None, help="passes over the data (3)")
    parser.add_argument("--lr", type=float, default=None, help="AdamW learning rate (1e-3)")
    parser.add_argument("--batch-size", type=int, default=None, help="conversations per step (8)")
    parser.add_argument("--max-length", type=int, default=None, help="tokens per example (1024)")
    parser.add_argument("--seed", type=int, default=None, help="shuffling and init seed (0)")
    parser.add_argument("--weight-decay", type=float, default=None, help="AdamW decay (0)")
    parser.add_argument(
        "--truncation",
        default=None,
        choices=["error", "right", "drop"],
        help="what to do with a longer example (error)",
    )


def sft_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The `run_sft` keyword arguments: the config file, then the flags given."""
    settings: dict[str, Any] = {}
    if args.config:
        loaded = yaml.safe_load(Path(args.config).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{args.config}: expected a mapping of run_sft settings")
        known = set(inspect.signature(_run_sft()).parameters)
        unknown = sorted(set(loaded) - known)
        if unknown:
            raise ValueError(f"{args.config}: unknown keys {unknown}; known: {sorted(known)}")
        settings.update(loaded)
    for flag, name in FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            settings[name] = value
    absent = {name for name in (*REQUIRED, "data", "trajectories")
              if settings.get(name) in (None, "")}  # fmt: skip
    missing = ["model_path"] if "model_path" in absent else []
    if {"data", "trajectories"} <= absent:
        missing.append("data or trajectories")
    missing += ["output_dir"] if "output_dir" in absent else []
    if missing:
        raise ValueError(f"agentrl sft needs {', '.join(missing)} (flags or --config)")
    if settings.get("trajectories"):  # checked before the model loads
        from agentrl.trajectories import read_trajectories

        settings["trajectories"] = read_trajectories(settings["trajectories"])
    settings.setdefault("data", None)
    return settings


def run(args: argparse.Namespace) -> int:
    try:
        settings = sft_settings(args)
    except ValueError as err:
        sys.stderr.write(f"{err}\n")
        return 2
    from agentrl.data.sft import SFTRowError

    try:
        metrics = _run_sft()(**settings)
    except SFTRowError as err:  # an example the data cannot make (too long, malformed)
        sys.stderr.write(f"agentrl sft: {err}\n")
        return 2
    out = Path(settings["output_dir"]) / "sft_metrics.json"
    out.write_text(json.dumps(metrics, indent=2) + "\n")
    logger.info("sft metrics written to %s", out)
    return 0


def _run_sft():
    from agentrl.trainer.sft import run_sft

    return run_sft


if __name__ == "__main__":
    import sys

    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "sft"))
