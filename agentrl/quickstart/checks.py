"""What the quickstart refuses before its first stage runs.

    check_run(out_dir, settings)    # ValueError naming the problem (a ConfigError for RL's)

- a setting out of its range (`--steps -1`, `--direct-rate 2`, an unknown `--size`, a
  `--teacher` that is no model directory);
- a rollout backend nobody registered, a `--server-python` that is not an executable;
- an `--out-dir` that is a file, lies under one, or sits where this process cannot write;
- the RL stage's config: the task's recipe with the run's paths and the overrides given,
  validated as `agentrl train` validates it, with the device and the reward and agent
  functions it names (agentrl/trainer/preflight.py). The stage starts after SFT, minutes
  into a run, so a bad override is found here, from the paths the stages will write
  (`rl_config`); the data files are read by the trainer's own checks when it starts.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentrl.quickstart.settings import QuickstartSettings, rl_config
from agentrl.tasks.quickstart import TASKS, TaskData
from agentrl.utils.out_dir import check_writable_dir

# setting -> (lowest, highest; None: no bound): the int and float knobs of QuickstartSettings
RANGES: dict[str, tuple[float, float | None]] = {
    "steps": (0, None),
    "sft_steps": (1, None),
    "sft_check": (0.0, 1.0),
    "sft_extra_steps": (0, None),
    "sft_check_rows": (1, None),
    "sft_warmup_steps": (0, None),
    "sft_examples": (1, None),
    "sft_batch_size": (1, None),
    "sft_max_length": (1, None),
    "direct_rate": (0.0, 1.0),
    "n_train": (1, None),
    "n_test": (1, None),
    "val_freq": (0, None),
    "val_rows": (0, None),
}
POSITIVE = ("sft_lr", "rl_lr")  # learning rates: > 0 when set


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def setting_problems(s: QuickstartSettings) -> list[str]:
    """Every setting out of its range, by its flag's name."""
    from agentrl.models.tiny import TINY_SIZES

    problems = []
    for name, (low, high) in RANGES.items():
        value = getattr(s, name)
        if value is not None and (value < low or (high is not None and value > high)):
            bound = f"between {low} and {high}" if high is not None else f">= {low}"
            problems.append(f"{_flag(name)} must be {bound}, got {value}")
    problems += [f"{_flag(name)} must be > 0, got {getattr(s, name)}" for name in POSITIVE
                 if getattr(s, name) is not None and not getattr(s, name) > 0]  # fmt: skip
    if s.size not in TINY_SIZES:
        problems.append(f"--size is {s.size!r}; choose one of {', '.join(TINY_SIZES)}")
    if s.sft_check > 0 and s.sft_examples <= s.sft_check_rows:
        problems.append(f"--sft-examples {s.sft_examples} leaves nothing to train on: the SFT "
                        f"check holds out {s.sft_check_rows} conversations (more --sft-examples, "
                        "or --sft-check 0)")
    if s.teacher is not None and not (Path(s.teacher) / "config.json").is_file():
        problems.append(f"--teacher {s.teacher} is not a model directory (no config.json)")
    return problems


def check_rollout(s: QuickstartSettings) -> None:
    """Refuse a rollout backend nobody registered or a `server_python` that is not an
    executable file."""
    from agentrl.rollout.backends.registry import backend_plugin

    backend_plugin(s.rollout)  # an unknown name raises, listing the registered ones
    python = s.server_python
    if python is not None and not (Path(python).is_file() and os.access(python, os.X_OK)):
        raise ValueError(
            f"--server-python {python!r} (actor_rollout_ref.rollout.server_python) is not an "
            "executable file; make vLLM's with `bash scripts/setup_vllm_env.sh` and pass "
            ".venv-vllm/bin/python"
        )


def check_rl_config(out_dir: Path, s: QuickstartSettings) -> None:
    """The RL stage's config, built from the paths the stages will write, must validate
    (ConfigError naming the keys); a CUDA device asked for must exist, a custom reward or
    agent function an override names must load, and the RL prompts fill one batch."""
    from agentrl.config import ConfigError
    from agentrl.trainer.preflight import device_problems, function_problems

    data_dir = out_dir / "data"
    data = TaskData(data_dir / "sft.jsonl", data_dir / "train.parquet",
                    data_dir / "test.parquet", {})  # fmt: skip
    tools = data_dir / "tools.yaml" if TASKS[s.task].tool_name else None
    val = data_dir / "val.parquet" if s.val_rows > 0 else None
    cfg = rl_config(out_dir / "model_sft", data, tools, out_dir / "rl", s, val)
    problems = device_problems(cfg) + function_problems(cfg)
    batch = int(cfg.data.train_batch_size)
    if s.steps > 0 and s.n_train < batch:  # the loader would have no full batch
        problems.append(f"--n-train {s.n_train} is fewer than one batch of {batch} "
                        "(data.train_batch_size); more --n-train, or lower it")
    if problems:
        raise ConfigError(problems)


def check_run(out_dir: str | Path, s: QuickstartSettings) -> None:
    """Everything `run_quickstart` refuses before its first stage (see the module
    docstring): a ValueError naming the first problem found."""
    if problems := setting_problems(s):
        raise ValueError("; ".join(problems))
    check_rollout(s)
    out = Path(out_dir).expanduser().resolve()
    check_writable_dir(out, "--out-dir")
    check_rl_config(out, s)


__all__ = ["RANGES", "check_rl_config", "check_rollout", "check_run", "setting_problems"]
