"""What a training run checks before anything heavy: every input problem found without a model.

    check_run_inputs(config)     # raises ConfigError listing every problem; before the tokenizer,
                                 # the data loaders and the workers (PPOTrainer.__init__)

The checks, each reported as one line of the `ConfigError` that `agentrl train` prints with
exit status 2 (agentrl/trainer/main.py):

- ``trainer.device=cuda`` where torch sees no CUDA device (unless ``ray_init.address``
  names a cluster, whose GPU nodes may join later: docs/scale.md);
- ``actor_rollout_ref.model.path`` (and ``data.tokenizer``) given as a local path that is no
  model directory (a hub id, ``org/name``, is left to the loader);
- a local ``trainer.default_local_dir`` this process cannot make or write;
- ``data.train_files`` and ``data.val_files`` exist and are parquet files with the
  ``data.prompt_key`` column and, when the reward is computed from the rows (no learned
  reward model, no agent function: agentrl/reward/base.py), the ``data.reward_fn_key``
  column and ``reward_model`` with ``ground_truth`` in the first rows; with the built-in
  scorers (no ``custom_reward_function.path``), every ``data_source`` of those rows must have
  one (agentrl/reward/score); the training files hold at least ``data.train_batch_size``
  rows. Only the schema, the row counts and the first ``SAMPLE_ROWS`` rows are read;
- the classes of ``multi_turn.tool_config_path`` and ``multi_turn.interaction_config_path``
  import (a missing module named as one, with the YAML file and the line of the
  ``class_name``), and ``custom_reward_function.path`` and ``rollout.agent_function`` load.

The trainer layer is the one that may import the data, reward, tool and interaction code
these checks need (docs/architecture.md); the config layer below cannot.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig

from agentrl.config import ConfigError

SAMPLE_ROWS = 64  # rows read from the start of each data file for the per-row checks
# the reward managers that score rows with `compute_score` (the built-in scorers by default)
SCORING_MANAGERS = ("naive", "dapo", "batch")


def check_run_inputs(config: DictConfig) -> None:
    """Raise `ConfigError` listing every problem `run_input_problems` finds."""
    if problems := run_input_problems(config):
        raise ConfigError(problems)


def run_input_problems(config: DictConfig) -> list[str]:
    """Every problem of the run's inputs that can be found without a model (see the module
    docstring); empty when there is none."""
    problems = device_problems(config)
    problems += model_problems(config)
    problems += plugin_problems(config)  # first: importing a tool may register a data source
    problems += data_problems(config)
    problems += output_problems(config)
    return problems


def _is_local(path: str) -> bool:
    """A path on this machine, not a hub id (``org/name``): absolute, ``./``, ``~`` or
    existing."""
    return path.startswith(("/", ".", "~")) or Path(path).exists()


def model_problems(config: DictConfig) -> list[str]:
    """A policy model or tokenizer named by a local path that is no Hugging Face model
    directory (a hub id, ``org/name``, is left to the loader)."""
    problems = []
    for key, value in (("actor_rollout_ref.model.path", config.actor_rollout_ref.model.path),
                       ("data.tokenizer", config.data.tokenizer)):
        if value and _is_local(str(value)):
            path = Path(os.path.expanduser(str(value)))
            if not path.is_dir():
                problems.append(f"{key}: {value} is not a directory (a Hugging Face model "
                                "directory, or a hub id org/name)")
            elif key != "data.tokenizer" and not (path / "config.json").is_file():
                problems.append(f"{key}: {value} has no config.json (not a Hugging Face "
                                "model directory)")
    return problems


def output_problems(config: DictConfig) -> list[str]:
    """A local ``trainer.default_local_dir`` this process cannot make or write."""
    from agentrl.utils.out_dir import check_writable_dir

    where = config.trainer.default_local_dir
    if not where or "://" in str(where):
        return []
    try:
        check_writable_dir(Path(os.path.expanduser(str(where))), "trainer.default_local_dir")
    except ValueError as err:
        return [str(err)]
    return []


def device_problems(config: DictConfig) -> list[str]:
    """``trainer.device=cuda`` without CUDA on a machine that runs the whole job."""
    if config.trainer.device != "cuda" or config.ray_init.address is not None:
        return []
    if torch.cuda.is_available():
        return []
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    return [f"trainer.device is cuda but torch finds no CUDA device on this machine (torch "
            f"{torch.__version__}, {build}); use trainer.device=cpu or auto"]


def plugin_problems(config: DictConfig) -> list[str]:
    """Tool and interaction classes that do not import; a custom reward function or an
    agent function that does not load."""
    from agentrl.interactions.loader import InteractionConfigError, import_interaction_classes
    from agentrl.tools.loader import ToolConfigError, import_tool_classes

    problems = []
    multi_turn = config.actor_rollout_ref.rollout.multi_turn
    key = "actor_rollout_ref.rollout.multi_turn"
    if multi_turn.tool_config_path:
        try:
            import_tool_classes(str(multi_turn.tool_config_path))
        except ToolConfigError as err:
            problems.append(f"{key}.tool_config_path: {err}")
    if multi_turn.interaction_config_path:
        try:
            import_interaction_classes(str(multi_turn.interaction_config_path))
        except InteractionConfigError as err:
            problems.append(f"{key}.interaction_config_path: {err}")
    return problems + function_problems(config)


def function_problems(config: DictConfig) -> list[str]:
    """A custom reward function or an agent function (``rollout.agent_function``) that does
    not load: code a path names, checked before the workers that would load it."""
    from agentrl.gateway.agent_rollout import load_agent_function
    from agentrl.reward.loader import get_custom_reward_fn

    problems = []
    if config.custom_reward_function.path:
        try:
            get_custom_reward_fn(config.custom_reward_function)
        except (ImportError, TypeError) as err:
            problems.append(f"custom_reward_function: {err}")
    if config.actor_rollout_ref.rollout.agent_function:
        try:
            load_agent_function(str(config.actor_rollout_ref.rollout.agent_function))
        except (ImportError, TypeError) as err:  # PluginLoadError is an ImportError
            problems.append(f"actor_rollout_ref.rollout.agent_function: {err}")
    return problems


def scores_rows(config: DictConfig) -> bool:
    """Whether the reward is computed from the data rows (``reward_model.ground_truth``, the
    ``reward_fn_key`` column): not when a learned reward model or an agent function gives
    it (``rm_scores``, agentrl/reward/base.py)."""
    return not (config.reward_model.enable or config.actor_rollout_ref.rollout.agent_function)


def uses_builtin_scorers(config: DictConfig) -> bool:
    """Whether rows are scored by ``default_compute_score`` (by ``data_source``)."""
    return (scores_rows(config) and not config.custom_reward_function.path
            and not config.reward_model.judge.enable
            and config.reward_model.reward_manager in SCORING_MANAGERS)


def data_problems(config: DictConfig) -> list[str]:
    """Missing data files, columns the config or the reward needs that they lack, and
    training files with fewer rows than one batch."""
    problems = []
    for key in ("data.train_files", "data.val_files"):
        for path in _files(config.data[key.split(".", 1)[1]]):
            problems += _file_problems(key, path, config)
    if not problems:
        problems += _batch_problems(config)
    return problems


def _batch_problems(config: DictConfig) -> list[str]:
    """Training rows (all files, before any filtering) fewer than one batch: the loader
    drops the last partial batch, so such a run has no step."""
    import pyarrow.parquet as pq

    paths = _files(config.data.train_files)
    rows = sum(pq.ParquetFile(path).metadata.num_rows for path in paths)
    batch = int(config.data.train_batch_size)
    if paths and rows < batch:
        return [f"data.train_files: {rows} rows, fewer than one batch of {batch} "
                "(data.train_batch_size); add rows or lower it"]
    return []


def _files(value: Any) -> list[Path]:
    if not value:
        return []
    items = list(value) if isinstance(value, (list, tuple, ListConfig)) else [value]
    return [Path(os.path.expanduser(str(item))) for item in items]


def _file_problems(key: str, path: Path, config: DictConfig) -> list[str]:
    import pyarrow.parquet as pq

    if not path.exists():
        return [f"{key}: {path} does not exist"]
    if not path.is_file():
        return [f"{key}: {path} is not a file (a parquet file is needed)"]
    try:
        parquet = pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises several kinds for a file that is not parquet
        return [f"{key}: {path} is not a parquet file ({type(err).__name__}: {err})"]
    columns = set(parquet.schema_arrow.names)
    data = config.data
    needed = {str(data.prompt_key): "data.prompt_key"}
    if scores_rows(config):
        needed[str(data.reward_fn_key)] = "data.reward_fn_key, the reward's data source"
        needed["reward_model"] = "the reward reads reward_model.ground_truth"
    missing = [f"'{name}' ({why})" for name, why in needed.items() if name not in columns]
    if missing:
        return [f"{key}: {path} has no column {', '.join(missing)}; its columns: "
                f"{', '.join(sorted(columns))}"]
    if not scores_rows(config):
        return []
    rows = _first_rows(parquet, [str(data.reward_fn_key), "reward_model"])
    for i, row in enumerate(rows):
        reward_model = row["reward_model"]
        if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
            return [f"{key}: {path} row {i}: reward_model must be a mapping with "
                    f"'ground_truth' (the reward reads it), got {reward_model!r}"]
    if uses_builtin_scorers(config):
        from agentrl.reward.score import has_scorer

        sources = sorted({str(row[data.reward_fn_key]) for row in rows})
        unknown = [s for s in sources if not has_scorer(s)]
        if unknown:
            return [f"{key}: {path}: no built-in scorer for {data.reward_fn_key} "
                    f"{', '.join(map(repr, unknown))}; set custom_reward_function.path (a "
                    "compute_score of your own) or register one with agentrl.reward.score."
                    "register_data_source (docs/rewards.md)"]
    return []


def _first_rows(parquet: Any, columns: list[str]) -> list[dict[str, Any]]:
    """The first `SAMPLE_ROWS` rows of `columns` as Python dicts."""
    for batch in parquet.iter_batches(batch_size=SAMPLE_ROWS, columns=columns):
        return batch.to_pylist()
    return []
