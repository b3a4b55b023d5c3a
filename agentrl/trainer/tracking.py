"""Experiment tracking: one `log(data, step)` fanned out to the configured backends.

    tracking = Tracking("agentrl", "run1", default_backend=["console", "file"], config=cfg)
    tracking.log({"critic/score/mean": 0.5}, step=1)
    tracking.finish()

Backends (`trainer.logger`, verl's names):

- ``console``: one compact INFO line per step through ``logging`` (logger
  ``agentrl.trainer``): the key metrics (``CONSOLE_KEYS``) and validation's ``val-core/``.
- ``file``: one JSON object per step, ``{"step": N, **metrics}``, in
  ``LOG_DIR/metrics.jsonl``; a resumed run continues the file, rows of the steps a run
  logs again (a fresh run, a resume from an older checkpoint) are replaced.
- ``tensorboard``: ``torch.utils.tensorboard.SummaryWriter`` in ``LOG_DIR/tensorboard``.
- ``wandb`` / ``mlflow``: a run named by project and experiment, with the config.

``LOG_DIR`` is ``log_dir`` when given, else ``trainer.default_local_dir`` of ``config`` (the
experiment directory, where the checkpoints also go). A backend whose package is not
installed is an error naming the package, raised before training starts.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
from pathlib import Path
from typing import Any, Protocol

from agentrl.config.validate import LOGGERS
from agentrl.utils.plain_config import plain_dict

logger = logging.getLogger("agentrl.trainer")

BACKENDS = LOGGERS  # trainer.logger's choices, defined by the config validator
# backend -> (module to import, pip package that provides it)
_PACKAGES = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
}


class Backend(Protocol):
    def log(self, data: dict[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


def _require(backend: str) -> Any:
    module, package = _PACKAGES[backend]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"trainer.logger lists {backend!r} but the package {package!r} is not installed: "
            f"pip install {package} (or remove {backend!r} from trainer.logger)"
        ) from exc


def _format(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# What the console shows of a training step, in this order (all of it goes to `file`).
CONSOLE_KEYS = (
    "critic/score/mean",
    "rollout/tool_call_rate",
    "response_length/mean",
    "num_turns/mean",
    "actor/pg_loss",
    "actor/entropy",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "critic/vf_loss",
    "timing_s/step",
)
CONSOLE_PREFIXES = ("val-core/",)  # validation's main numbers, every key


class ConsoleBackend:
    """One compact log line per step: the CONSOLE_KEYS present and every validation main
    number (`val-core/...`); a step with none of them prints all its metrics, by name."""

    def log(self, data: dict[str, float], step: int) -> None:
        keys = [k for k in CONSOLE_KEYS if k in data]
        keys += sorted(k for k in data if k.startswith(CONSOLE_PREFIXES))
        body = " - ".join(f"{k}:{_format(data[k])}" for k in keys or sorted(data))
        logger.info("step:%d - %s", step, body)

    def finish(self) -> None:
        pass


class FileBackend:
    """Metrics as jsonl lines ``{"step": N, ...}``; non-finite floats are written as null.

    The first step logged decides what of an existing file stays: the rows of earlier
    steps. A resumed run so continues its file, and a fresh run (or a resume from an older
    checkpoint) replaces the rows it is about to write again.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: Any = None

    def _open(self, first_step: int) -> None:
        kept = []
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    if json.loads(line)["step"] < first_step:
                        kept.append(line + "\n")
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a crash
        self._file = self.path.open("w", encoding="utf-8")
        self._file.writelines(kept)

    def log(self, data: dict[str, float], step: int) -> None:
        if self._file is None:
            self._open(step)
        row = {"step": step}
        for key, value in data.items():
            finite = not isinstance(value, float) or math.isfinite(value)
            row[key] = value if finite else None
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def finish(self) -> None:
        if self._file is not None:
            self._file.close()


class TensorboardBackend:
    def __init__(self, log_dir: Path) -> None:
        _require("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, data: dict[str, float], step: int) -> None:
        for key, value in data.items():
            if isinstance(value, int | float):
                self.writer.add_scalar(key, value, step)

    def finish(self) -> None:
        self.writer.close()


class WandbBackend:
    def __init__(self, project: str, experiment: str, config: dict[str, Any]) -> None:
        self.wandb = _require("wandb")
        self.run = self.wandb.init(project=project, name=experiment, config=config)

    def log(self, data: dict[str, float], step: int) -> None:
        self.run.log(data, step=step)

    def finish(self) -> None:
        self.run.finish()


class MlflowBackend:
    def __init__(self, project: str, experiment: str, config: dict[str, Any]) -> None:
        self.mlflow = _require("mlflow")
        self.mlflow.set_experiment(project)
        self.mlflow.start_run(run_name=experiment)
        flat = {k: str(v) for k, v in _flatten(config).items()}
        self.mlflow.log_params(dict(list(flat.items())[:500]))  # mlflow caps params per call

    def log(self, data: dict[str, float], step: int) -> None:
        # mlflow metric names may not hold '@'
        self.mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in data.items()}, step=step)

    def finish(self) -> None:
        self.mlflow.end_run()


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


class Tracking:
    """Log metrics to every backend of ``default_backend`` (a name or a list of names)."""

    def __init__(
        self,
        project_name: str,
        experiment_name: str,
        default_backend: str | list[str] | tuple[str, ...] = "console",
        config: Any = None,
        log_dir: str | Path | None = None,
    ) -> None:
        names = [default_backend] if isinstance(default_backend, str) else list(default_backend)
        unknown = [n for n in names if n not in BACKENDS]
        if unknown:
            raise ValueError(f"unknown tracking backend(s) {unknown}; valid: {', '.join(BACKENDS)}")
        plain = plain_dict(config, "the tracked config")
        if log_dir is None:
            log_dir = plain.get("trainer", {}).get("default_local_dir") or "."
        self.log_dir = Path(log_dir)
        self.backends: dict[str, Backend] = {}
        for name in dict.fromkeys(names):  # keep order, drop duplicates
            self.backends[name] = self._create(name, project_name, experiment_name, plain)

    def _create(self, name: str, project: str, experiment: str, config: dict) -> Backend:
        if name == "console":
            return ConsoleBackend()
        if name == "file":
            return FileBackend(self.log_dir / "metrics.jsonl")
        if name == "tensorboard":
            return TensorboardBackend(self.log_dir / "tensorboard")
        if name == "wandb":
            return WandbBackend(project, experiment, config)
        return MlflowBackend(project, experiment, config)

    def log(self, data: dict[str, Any], step: int) -> None:
        """Send ``data`` (metric name -> number) for training step ``step`` to every backend."""
        for backend in self.backends.values():
            backend.log(data, step)

    def finish(self) -> None:
        """Flush and close every backend (idempotent)."""
        for backend in self.backends.values():
            backend.finish()
        self.backends = {}
