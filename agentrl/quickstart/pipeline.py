"""The quickstart's stages, in order, shared by every task (agentrl/tasks/quickstart.py):
a nano model learns, on CPU, when to call its tool.

    report = run_quickstart(Path("outputs/quickstart"), QuickstartSettings(seed=0))
    report = run_quickstart(Path("outputs/search"), settings_for("search", seed=1))

0. checks, before any stage: the settings, the out dir and the RL stage's config (the
   recipe with the overrides given), which the trainer would otherwise meet only after SFT
   (agentrl/quickstart/checks.py; the settings and that config: settings.py);
1. model: a Qwen2-shaped nano model (0.2M parameters) with random weights, whose chat
   template lists the tools in one short line (`compact_tools`);
2. data: three disjoint pools (the task's): SFT conversations, RL training prompts and
   held-out test prompts; no item is in two pools (checked);
3. sft: a warm-up on an imperfect teacher: on some question phrasings most traces answer at
   once, with the true answer, instead of calling the tool. The model cannot know these
   answers, so after SFT it under-uses the tool and is often wrong: RL has something to
   discover, namely when to call it. The stage ends on a measured skill, not a step count:
   once the model reproduces `sft_check` of the turns of held-out tool-using traces
   (`agentrl.trainer.sft_check`; the skill arrives in a jump whose step moves with the
   seed), it trains `sft_extra_steps` more and stops; `sft_steps` is the cap. Reaching the
   cap before the check passes misses the stage's target and stops the run
   (agentrl/quickstart/targets.py: TargetMissed, exit status 3 from the command), unless
   `allow_missed_targets`;
4. eval_sft: greedy and sampled rollouts of the test set with the real tool;
5. rl: GRPO with multi-turn tool rollouts (`agentrl.trainer.run_train`, the task's recipe),
   reward = the task's exact score only; rollouts dumped for the report's trajectory viewer;
   on the `rollout` backend (`hf`, the embedded engine, or e.g. `vllm`'s servers:
   `ROLLOUT_VARIANTS`; every other stage generates with the embedded hf engine);
   every `val_freq` steps (and before the first) the trainer validates greedily on the
   first `val_rows` test problems (`data.val_files`, `trainer.test_freq`): the report's
   held-out curve over RL steps, between the full evaluations before and after;
6. eval_rl: the same evaluation of the last checkpoint's HF export (with `teacher` set, the
   RL stage distils from that model on-policy instead, and `eval_teacher`, before it,
   evaluates the teacher: one scoring below the student after SFT stops the run unless
   `allow_weak_teacher` or `allow_missed_targets`; recipes/distill/);
7. control, eval_control: SFT continued on the same teacher for the RL stage's wall time,
   then evaluated: what the same compute gives without RL;
8. report: `report.json` (with `targets`: each stage target, met or not), then `agentrl
   report` writes `report.html` from the run directory, also for a run that stopped.

The tool's server, if it has one (the search task's retriever, the retool task's code
sandbox), runs for the whole run and is stopped at its end, also when a stage fails.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agentrl.quickstart.checks import check_run
from agentrl.quickstart.evaluation import evaluate_model, summary_table
from agentrl.quickstart.settings import QuickstartSettings, environment_overrides, rl_config
from agentrl.quickstart.targets import meet, sft_target, teacher_target
from agentrl.tasks.quickstart import TASKS

logger = logging.getLogger("agentrl.quickstart")

# RL step metrics kept in the report's reward curve (when the trainer reports them).
CURVE_KEYS = (
    "critic/score/mean",
    "rollout/tool_call_rate",
    "actor/pg_loss",
    "actor/entropy",
    "response_length/mean",
    "timing_s/step",
)


def write_val_slice(test_path: Path, out_path: Path, rows: int) -> Path | None:
    """The first `rows` problems of the test set as `out_path` (the validation during RL);
    None for `rows` 0."""
    import pandas as pd

    if rows <= 0:
        return None
    pd.read_parquet(test_path).iloc[:rows].to_parquet(out_path, index=False)
    return out_path


def rl_model_dir(cfg: DictConfig) -> Path:
    """The HF export of the last checkpoint (`global_step_N/actor/huggingface`)."""
    root = Path(str(cfg.trainer.default_local_dir))
    step = int((root / "latest_checkpointed_iteration.txt").read_text().strip())
    path = root / f"global_step_{step}" / "actor" / "huggingface"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no HF export in {path}: the recipe's actor.checkpoint.save_contents needs hf_model"
        )
    return path


def reward_curve(history: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """Per-step RL metrics for the report (the keys of CURVE_KEYS the trainer logged)."""
    return [
        {"step": i + 1, **{k: float(m[k]) for k in CURVE_KEYS if k in m}}
        for i, m in enumerate(history)
    ]


def run_quickstart(out_dir: Path, settings: QuickstartSettings | None = None, *,
                   check: bool = True) -> dict[str, Any]:
    """Run every stage (see the module docstring); write and return the report. First
    `check_run` refuses bad settings and a bad RL config (agentrl/quickstart/checks.py);
    `check=False` when the caller has just run it."""
    s = settings or QuickstartSettings()
    if check:
        check_run(out_dir, s)
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    log_handler = _file_log(out_dir / "quickstart.log")
    timing: dict[str, float] = {}
    settings_dict = dataclasses.asdict(s) | {"overrides": list(s.overrides)}  # as JSON reads
    report: dict[str, Any] = {"settings": settings_dict, "timing_s": timing}
    started = time.perf_counter()
    try:
        _run_stages(out_dir, s, report, timing)
    finally:  # a run stopped mid-way (an error, Ctrl-C) still reports what it has
        timing["total"] = time.perf_counter() - started
        _write_reports(out_dir, report, timing)
        logging.getLogger().removeHandler(log_handler)
        log_handler.close()
    table = summary_table(report, tool_column=bool(TASKS[s.task].tool_name))
    logger.info("\n%s\nreport: %s", table, out_dir / "report.html")
    return report


def _write_reports(out_dir: Path, report: dict[str, Any], timing: dict[str, float]) -> None:
    """`report.json`, then `report.html` (`agentrl report`), then `report.json` again with
    the report's own seconds. A failing page is a warning: it must not hide why a run
    stopped."""
    from agentrl.report import write_report

    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    try:
        with _stage("report", timing):
            write_report(out_dir)
    except Exception as err:
        logger.warning("could not write %s: %s", out_dir / "report.html", err)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")


def _run_stages(
    out_dir: Path, s: QuickstartSettings, report: dict[str, Any], timing: dict[str, float]
) -> None:
    from agentrl.models.tiny import make_tiny_model
    from agentrl.trainer.sft import run_sft

    task = TASKS[s.task]
    with _stage("model", timing):
        init_dir = make_tiny_model(
            out_dir / "model_init", size=s.size, seed=s.seed, chat_template="compact_tools",
            tie_word_embeddings=not s.untied,
        )
    with _stage("data", timing):
        data = task.prepare(out_dir / "data", s)
    with task.tools(out_dir / "data") as tool_config:

        def evaluate(model_dir: Path, name: str) -> dict[str, Any]:
            metrics = evaluate_model(
                task.recipe_config, model_dir, data.test, out_dir / name, s.seed,
                task.tool_name, data.groups, task.aliases,
                environment_overrides(tool_config, data, s.task), task.answer_tag,
                task.metrics,
            )  # fmt: skip
            logger.info(
                "%s: greedy accuracy %.3f ± %.3f, sampled %.3f ± %.3f, tool-call rate %.2f",
                name, metrics["accuracy"], metrics["accuracy_stderr"],
                metrics["sampled_accuracy"], metrics["sampled_accuracy_stderr"],
                metrics["tool_call_rate"],
            )  # fmt: skip
            return metrics

        with _stage("sft", timing):
            report["sft"], sft_rows = sft_stage(init_dir, data.sft, out_dir / "model_sft", s)
        meet(report, sft_target(report["sft"]), s.allow_missed_targets,
             "the stages after SFT")  # fmt: skip
        sft_kwargs = {"lr": s.sft_lr, "batch_size": s.sft_batch_size, "seed": s.seed,
                      "max_length": s.sft_max_length}
        with _stage("eval_sft", timing):
            report["eval_sft"] = evaluate(out_dir / "model_sft", "eval_sft")
        if s.steps <= 0:
            return
        if s.teacher is not None:  # before distillation: a weaker teacher stops the run
            with _stage("eval_teacher", timing):
                report["teacher"] = evaluate(Path(s.teacher), "eval_teacher")
            meet(report, teacher_target(report["teacher"], report["eval_sft"]),
                 s.allow_missed_targets or s.allow_weak_teacher, "distillation")  # fmt: skip
        val_path = write_val_slice(data.test, out_dir / "data" / "val.parquet", s.val_rows)
        cfg = rl_config(out_dir / "model_sft", data, tool_config, out_dir / "rl", s, val_path)
        with _stage("rl", timing):
            from agentrl.trainer import run_train

            report["rl"] = reward_curve(run_train(cfg))
        with _stage("eval_rl", timing):
            report["eval_rl"] = evaluate(rl_model_dir(cfg), "eval_rl")
        if not s.control:
            return
        with _stage("control", timing):
            # The same teacher for as long as RL ran: no warm-up, the SFT lr from the start.
            report["control_sft"] = run_sft(
                out_dir / "model_sft", sft_rows, out_dir / "model_control", steps=10**9,
                max_time_s=timing["rl"], warmup_ratio=0.0, eval_loss=False, **sft_kwargs,
            )  # fmt: skip
        with _stage("eval_control", timing):
            report["control"] = evaluate(out_dir / "model_control", "eval_control")


def sft_stop_rule(sft_path: Path, s: QuickstartSettings) -> tuple[list[dict], Any]:
    """The SFT training rows and the check that ends the stage: the last
    `sft_check_rows` tool-using conversations are held out of training for the check
    (None, and every row trained, with `sft_check=0`)."""
    from agentrl.data.sft import read_sft_rows
    from agentrl.trainer.sft_check import SkillCheck

    rows = read_sft_rows(sft_path)
    if s.sft_check <= 0:
        return rows, None
    held = [i for i, r in enumerate(rows) if r.get("uses_tool", True)][-s.sft_check_rows :]
    if len(held) < s.sft_check_rows or len(held) >= len(rows):
        raise ValueError(
            f"sft_check_rows={s.sft_check_rows} needs that many tool-using SFT conversations "
            f"and some left to train on; {sft_path} has {len(rows)} rows, {len(held)} of them "
            "tool-using (more --sft-examples, or --sft-check 0 for a fixed --sft-steps)"
        )
    chosen = set(held)
    check = SkillCheck(
        [rows[i] for i in held], threshold=s.sft_check, extra_steps=s.sft_extra_steps
    )
    return [r for i, r in enumerate(rows) if i not in chosen], check


def sft_stage(
    init_dir: Path, sft_path: Path, out_dir: Path, s: QuickstartSettings
) -> tuple[dict[str, Any], list[dict]]:
    """The quickstart's SFT stage (also the warm start of bench/async_vs_sync.py): the
    model of `init_dir` trained on `sft_path` into `out_dir` until `sft_stop_rule`'s check
    passes (or for `sft_steps`); returns run_sft's metrics and the rows it trained on."""
    from agentrl.trainer.sft import run_sft

    rows, check = sft_stop_rule(sft_path, s)
    metrics = run_sft(
        init_dir, rows, out_dir, steps=s.sft_steps, lr=s.sft_lr, batch_size=s.sft_batch_size,
        seed=s.seed, eval_loss=False, warmup_steps=s.sft_warmup_steps, until=check,
        max_length=s.sft_max_length,
    )  # fmt: skip
    reached = (metrics.get("skill_check") or {}).get("reached_at")
    if reached is not None:  # a cap hit first is run_sft's own warning
        logger.info(
            "sft: held-out turn reproduction reached %.2f at step %d; stopped at step %d",
            check.threshold, reached, metrics["steps"],
        )  # fmt: skip
    return metrics, rows


class _stage:
    """Times a stage into `timing[name]` and logs its start and end."""

    def __init__(self, name: str, timing: dict[str, float]):
        self.name, self.timing = name, timing

    def __enter__(self) -> None:
        logger.info("stage %s ...", self.name)
        self.started = time.perf_counter()

    def __exit__(self, *exc_info: object) -> None:
        self.timing[self.name] = time.perf_counter() - self.started
        logger.info("stage %s: %.1fs", self.name, self.timing[self.name])


def _file_log(path: Path) -> logging.Handler:
    """Copy every log record of the run to `path` (the root logger's level applies)."""
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    return handler
