"""The quickstart's learning table: `agentrl quickstart` with every seed given (0-9 by
default), one after another (each alone on the machine), and the targets checked on every
seed. Rows are ordered worst first: the worst seed is the first row, and named last.

    python bench/quickstart_seeds.py                       # seeds 0-9, outputs/quickstart_seeds/
    python bench/quickstart_seeds.py --seeds 0 --out-dir /tmp/qs   # one seed
    python bench/quickstart_seeds.py --task search         # the CPU Search-R1 run's table
    python bench/quickstart_seeds.py --task retool         # the CPU ReTool run's table
    python bench/quickstart_seeds.py --task reasoning_gym  # recipes/envs (reasoning-gym)
    python bench/quickstart_seeds.py --task blackjack      # recipes/envs (TextArena's game)
    python bench/quickstart_seeds.py --task dapo           # recipes/dapo/run_cpu.sh's table
    python bench/quickstart_seeds.py --task distill        # recipes/distill/run_cpu.sh's, teacher included
    python bench/quickstart_seeds.py --agent-function examples/agents/calculator_agent.py:run
                                  # GRPO in agent mode: the agent's OpenAI client, the gateway
    python bench/quickstart_seeds.py --seeds 0 1 2 --rollout vllm --server-python .venv-vllm/bin/python
                                  # the GRPO stage on vLLM servers (the tiny model, untied)
    python bench/quickstart_seeds.py --agent-function examples/agents/calculator_agent.py:run --mode async
                                  # agent mode trained off-policy (trainer.mode=async)

Each run is the README's main job with its defaults, in `OUT_DIR/seed_N/`. The script
prints a markdown table (paste it into docs/quickstart.md): greedy held-out accuracy after
SFT, after GRPO and of the SFT-only control, each ± its standard error, the sampled (T=1)
accuracies, the tool-call rates, and the seconds end to end; then every target with PASS or
FAIL per seed: SFT <= 0.45, GRPO >= 0.85, tool-call rate after GRPO >= 0.95, control at
least 0.30 below GRPO, total < 300 s (`--task search`: exact match at least 0.30 above SFT,
two-hop questions improve, GRPO above the control, total < 600 s; `--task retool`: accuracy
at least 0.30 above SFT and above the control, total < 900 s; `--task reasoning_gym`:
accuracy at least 0.30 above SFT and above the control each, tool-call rate >= 0.95, total < 600 s; `--task blackjack`: the game's score at least 0.20
above SFT and 0.15 above the control, hit rate on hands of 17-20 after GRPO <= 0.20, total <
900 s, and a table of the moves by hand score; `--task dapo`, the calculator
task through `recipes/dapo/run_cpu.sh`: the calculator's targets with total < 600 s, and a
table of the dynamic sampling's generation batches per step; `--task distill`, the
distillation recipe with its own teacher per seed: the teacher >= 0.85 after its GRPO, the
student at least 0.20 above its SFT and 0.10 above its control, and a table of the
teacher's own run). Runs that exist already are read, not run again
(`--rerun` runs them anyway). With `--agent-function` the GRPO stage runs in agent mode
(`actor_rollout_ref.rollout.agent_function`, docs/gateway.md) and the runs go to
`OUT_DIR/agent_seed_N/`; the evaluations are the quickstart's own, so the table compares.
With `--rollout vllm` the GRPO stage runs on a vLLM server (`agentrl quickstart --rollout
vllm`: the tiny model with an untied output layer, vLLM's CPU attention refusing the nano
model's heads; SFT and the evaluations on the hf engine), the runs go to
`OUT_DIR/vllm_seed_N/` and the targets are the calculator's with total < 900 s (the larger
model's SFT and the server's start-up).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CALCULATOR_TARGETS = (
    ("greedy accuracy after SFT <= 0.45", lambda r: r["eval_sft"]["accuracy"] <= 0.45),
    ("greedy accuracy after GRPO >= 0.85", lambda r: r["eval_rl"]["accuracy"] >= 0.85),
    ("tool-call rate after GRPO >= 0.95", lambda r: r["eval_rl"]["tool_call_rate"] >= 0.95),
    (
        "control at least 0.30 below GRPO",
        lambda r: r["eval_rl"]["accuracy"] - r["control"]["accuracy"] >= 0.30,
    ),
    ("end to end < 300 s", lambda r: r["timing_s"]["total"] < 300),
)
SEARCH_TARGETS = (
    (
        "exact match at least 0.30 above SFT",
        lambda r: r["eval_rl"]["exact_match"] - r["eval_sft"]["exact_match"] >= 0.30,
    ),
    (
        "two-hop questions improve",
        lambda r: r["eval_rl"]["by_hops"]["2_hop"]["accuracy"]
        > r["eval_sft"]["by_hops"]["2_hop"]["accuracy"],
    ),
    (
        "GRPO above the control",
        lambda r: r["eval_rl"]["exact_match"] > r["control"]["exact_match"],
    ),
    ("end to end < 600 s", lambda r: r["timing_s"]["total"] < 600),
)
RETOOL_TARGETS = (
    (
        "accuracy at least 0.30 above SFT",
        lambda r: r["eval_rl"]["accuracy"] - r["eval_sft"]["accuracy"] >= 0.30,
    ),
    ("GRPO above the control", lambda r: r["eval_rl"]["accuracy"] > r["control"]["accuracy"]),
    ("end to end < 900 s", lambda r: r["timing_s"]["total"] < 900),
)
REASONING_GYM_TARGETS = (
    (
        "accuracy at least 0.30 above SFT",
        lambda r: r["eval_rl"]["accuracy"] - r["eval_sft"]["accuracy"] >= 0.30,
    ),
    (
        "control at least 0.30 below GRPO",
        lambda r: r["eval_rl"]["accuracy"] - r["control"]["accuracy"] >= 0.30,
    ),
    ("tool-call rate after GRPO >= 0.95", lambda r: r["eval_rl"]["tool_call_rate"] >= 0.95),
    ("end to end < 600 s", lambda r: r["timing_s"]["total"] < 600),
)
BLACKJACK_TARGETS = (
    (
        "score at least 0.20 above SFT",
        lambda r: r["eval_rl"]["accuracy"] - r["eval_sft"]["accuracy"] >= 0.20,
    ),
    (
        "control at least 0.15 below GRPO",
        lambda r: r["eval_rl"]["accuracy"] - r["control"]["accuracy"] >= 0.15,
    ),
    ("hit rate on 17-20 after GRPO <= 0.20", lambda r: r["eval_rl"]["hit_rate_high"] <= 0.20),
    ("end to end < 900 s", lambda r: r["timing_s"]["total"] < 900),
)
DAPO_TARGETS = (
    *CALCULATOR_TARGETS[:4],
    ("end to end < 600 s", lambda r: r["timing_s"]["total"] < 600),
)
# the calculator's learning targets on the `--rollout vllm` variant (the tiny model: its SFT
# steps cost more than the nano model's, and the GRPO stage starts a vLLM server first)
VLLM_CALCULATOR_TARGETS = (
    *CALCULATOR_TARGETS[:4],
    ("end to end < 900 s", lambda r: r["timing_s"]["total"] < 900),
)
# recipes/distill/run_cpu.sh: the teacher (a tiny quickstart, trained with the seed) after its
# GRPO on the student's problems, and the nano student distilled from it (issue 59)
DISTILL_TARGETS = (
    ("teacher after GRPO >= 0.85", lambda r: r["teacher"]["accuracy"] >= 0.85),
    ("student at least 0.20 above its SFT",
     lambda r: r["eval_rl"]["accuracy"] - r["eval_sft"]["accuracy"] >= 0.20),
    ("student at least 0.10 above the control",
     lambda r: r["eval_rl"]["accuracy"] - r["control"]["accuracy"] >= 0.10),
)
TARGETS = {
    "calculator": CALCULATOR_TARGETS,
    "distill": DISTILL_TARGETS,
    "search": SEARCH_TARGETS,
    "retool": RETOOL_TARGETS,
    "reasoning_gym": REASONING_GYM_TARGETS,
    "blackjack": BLACKJACK_TARGETS,
    "dapo": DAPO_TARGETS,
}
# Tasks run through a recipe script (`bash SCRIPT OUT_DIR --seed N`) instead of
# `agentrl quickstart --task TASK`.
RECIPE_SCRIPTS = {"dapo": "recipes/dapo/run_cpu.sh", "distill": "recipes/distill/run_cpu.sh"}
REPO = Path(__file__).resolve().parent.parent


def seed_command(task: str, out: Path, seed: int, agent_function: str | None = None,
                 rollout: str | None = None, server_python: str | None = None,
                 mode: str = "sync") -> list[str]:
    """The command that runs one seed of TASK into OUT (its GRPO stage on the `rollout`
    backend's quickstart variant when given, its servers under `server_python`, in
    `trainer.mode` MODE)."""
    if task in RECIPE_SCRIPTS:
        cmd = ["bash", str(REPO / RECIPE_SCRIPTS[task]), str(out), "--seed", str(seed)]
    else:
        agentrl = Path(sys.executable).with_name("agentrl")
        cmd = [str(agentrl), "quickstart", "--task", task, "--out-dir", str(out),
               "--seed", str(seed)]  # fmt: skip
    if rollout:
        cmd += ["--rollout", rollout]
    if server_python:
        cmd += ["--server-python", server_python]
    if agent_function:
        cmd += [f"actor_rollout_ref.rollout.agent_function={agent_function}",
                "actor_rollout_ref.rollout.multi_turn.enable=false"]  # fmt: skip
    if mode != "sync":
        cmd += [f"trainer.mode={mode}"]
    return cmd


def run_seed(
    out_dir: Path, task: str, seed: int, rerun: bool, agent_function: str | None = None,
    rollout: str | None = None, server_python: str | None = None, mode: str = "sync",
) -> dict[str, Any]:
    prefix = (("agent_" if agent_function else "") + (f"{rollout}_" if rollout else "")
              + (f"{mode}_" if mode != "sync" else ""))
    name = f"{prefix}seed_{seed}"
    report_path = out_dir / name / "report.json"
    if rerun or not report_path.is_file():
        # The recipe scripts run this interpreter's venv's agentrl.
        env = {**os.environ, "AGENTRL_VENV": str(Path(sys.executable).parent.parent)}
        subprocess.run(
            seed_command(task, report_path.parent, seed, agent_function, rollout, server_python,
                         mode),
            check=True, env=env,
        )
    report = json.loads(report_path.read_text())
    metrics = report_path.parent / "rl" / "metrics.jsonl"
    if task == "dapo" and metrics.is_file():
        report["filter_groups"] = filter_groups_summary(metrics)
    teacher = report_path.parent / "teacher" / "report.json"
    if task == "distill" and teacher.is_file():  # the teacher's own run (its SFT steps)
        report["teacher_run"] = json.loads(teacher.read_text())
    return report


def filter_groups_summary(metrics_path: Path) -> dict[str, float]:
    """Dynamic sampling per RL step, from the run's metrics.jsonl: generation batches per
    step (mean, max) and the share of prompts kept per batch (mean, min)."""
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    batches = [r["train/num_gen_batches"] for r in rows if "train/num_gen_batches" in r]
    kept = [r["train/kept_prompt_ratio"] for r in rows if "train/kept_prompt_ratio" in r]
    if not batches or not kept:
        raise ValueError(f"{metrics_path}: no train/num_gen_batches or train/kept_prompt_ratio")
    return {
        "gen_batches_mean": sum(batches) / len(batches),
        "gen_batches_max": max(batches),
        "kept_ratio_mean": sum(kept) / len(kept),
        "kept_ratio_min": min(kept),
    }


def _pm(metrics: dict[str, Any], key: str = "accuracy", err: str = "accuracy_stderr") -> str:
    return f"{metrics[key]:.3f} ± {metrics[err]:.3f}"


def table(reports: dict[int, dict[str, Any]]) -> str:
    lines = [
        "| seed | greedy acc. after SFT | after GRPO | SFT-only control | sampled acc. SFT -> GRPO "
        "| tool-call rate SFT -> GRPO (control) | SFT steps (check passed at) "
        "| seconds (SFT, GRPO, total) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for seed, r in reports.items():
        sft, rl, control, t = r["eval_sft"], r["eval_rl"], r["control"], r["timing_s"]
        sampled = (
            f"{_pm(sft, 'sampled_accuracy', 'sampled_accuracy_stderr')} -> "
            f"{_pm(rl, 'sampled_accuracy', 'sampled_accuracy_stderr')}"
        )
        rates = (
            f"{sft['tool_call_rate']:.2f} -> {rl['tool_call_rate']:.2f} "
            f"({control['tool_call_rate']:.2f})"
        )
        passed = (r["sft"].get("skill_check") or {}).get("reached_at")
        lines.append(
            f"| {seed} | {_pm(sft)} | {_pm(rl)} | {_pm(control)} | {sampled} | {rates} "
            f"| {r['sft']['steps']} ({passed if passed is not None else '-'}) "
            f"| {t['sft']:.0f}, {t['rl']:.0f}, {t['total']:.0f} |"
        )
    first = next(iter(reports.values()))
    if "by_hops" in first["eval_sft"]:
        lines += ["", "| seed | searches per question SFT -> GRPO | two-hop exact match SFT -> GRPO "
                  "(control) | one-hop |", "|---|---|---|---|"]  # fmt: skip
        for seed, r in reports.items():
            hops = [r[k]["by_hops"] for k in ("eval_sft", "eval_rl", "control")]
            lines.append(
                f"| {seed} | {r['eval_sft']['searches_per_question']:.2f} -> "
                f"{r['eval_rl']['searches_per_question']:.2f} | "
                f"{_pm(hops[0]['2_hop'])} -> {_pm(hops[1]['2_hop'])} ({_pm(hops[2]['2_hop'])}) | "
                f"{_pm(hops[0]['1_hop'])} -> {_pm(hops[1]['1_hop'])} |"
            )
    if "by_kind" in first["eval_sft"]:
        kinds = sorted(first["eval_sft"]["by_kind"])
        lines += ["", "| seed | sandbox runs per problem SFT -> GRPO | "
                  + " | ".join(f"{k} SFT -> GRPO (control)" for k in kinds) + " |",
                  "|---|---|" + "---|" * len(kinds)]  # fmt: skip
        for seed, r in reports.items():
            by = [r[k]["by_kind"] for k in ("eval_sft", "eval_rl", "control")]
            cells = [f"{_pm(by[0][k])} -> {_pm(by[1][k])} ({_pm(by[2][k])})" for k in kinds]
            lines.append(
                f"| {seed} | {r['eval_sft']['sandbox_runs_per_question']:.2f} -> "
                f"{r['eval_rl']['sandbox_runs_per_question']:.2f} | " + " | ".join(cells) + " |"
            )
    if "hit_rate_high" in first["eval_sft"]:
        # hit_rate_21 is newer than the first runs: a column only where every report has it
        bands = {"hit_rate_low": "hit rate on 11 or less SFT -> GRPO (control)",
                 "hit_rate_mid": "on 12-16", "hit_rate_high": "on 17-20", "hit_rate_21": "on 21"}
        bands = {k: v for k, v in bands.items()
                 if all(k in r["eval_sft"] for r in reports.values())}  # fmt: skip
        columns = ["seed", *bands.values(), "moves per game", "invalid moves after GRPO"]
        lines += ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for seed, r in reports.items():
            sft, rl, control = r["eval_sft"], r["eval_rl"], r["control"]
            cells = [f"{sft[k]:.2f} -> {rl[k]:.2f} ({control[k]:.2f})" for k in bands]
            lines.append(
                f"| {seed} | " + " | ".join(cells) + f" | {sft['moves_per_game']:.1f} -> "
                f"{rl['moves_per_game']:.1f} | {rl['invalid_move_rate']:.3f} |"
            )
    if "filter_groups" in first:
        lines += ["", "| seed | generation batches per step (mean, max) "
                  "| prompts kept per batch (mean, min) |", "|---|---|---|"]  # fmt: skip
        for seed, r in reports.items():
            f = r["filter_groups"]
            lines.append(
                f"| {seed} | {f['gen_batches_mean']:.1f}, {f['gen_batches_max']:.0f} "
                f"| {f['kept_ratio_mean']:.2f}, {f['kept_ratio_min']:.2f} |"
            )
    if "teacher_run" in first:
        lines += ["", "| seed | teacher SFT steps (check passed at) | teacher after SFT "
                  "| teacher after GRPO | teacher on the student's problems |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for seed, r in reports.items():
            t = r["teacher_run"]
            passed = (t["sft"].get("skill_check") or {}).get("reached_at")
            lines.append(
                f"| {seed} | {t['sft']['steps']} ({passed if passed is not None else '-'}) "
                f"| {_pm(t['eval_sft'])} | {_pm(t['eval_rl'])} | {_pm(r['teacher'])} |"
            )
    n = int(first["eval_sft"]["trajectories"])
    lines.append(f"\n{n} held-out problems per evaluation; ± is the standard error of the mean "
                 "score (the binomial one for scores of 0 and 1).")
    return "\n".join(lines)


def worst_first(reports: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The reports ordered by held-out accuracy after GRPO, worst first (ties keep the
    order the seeds were given): the worst seed is the table's first row."""
    return dict(sorted(reports.items(), key=lambda kv: kv[1]["eval_rl"]["accuracy"]))


def summary_line(reports: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The JSON line: each figure's `median`, `min` and `max` over the seeds (each seed a
    fresh process; bench/repeat.py's summary), `runs` and `seeds`."""
    from repeat import summarize  # bench/repeat.py, beside this script

    figures = [
        {
            "eval_sft_accuracy": r["eval_sft"]["accuracy"],
            "eval_rl_accuracy": r["eval_rl"]["accuracy"],
            "control_accuracy": r["control"]["accuracy"],
            "sft_steps": r["sft"]["steps"],
            "total_s": r["timing_s"]["total"],
        }
        for r in reports.values()
    ]
    return {**summarize(figures), "runs": len(reports), "seeds": list(reports)}


def targets_of(task: str, rollout: str | None = None) -> tuple:
    """The targets of TASK's table; the vllm variant of the calculator has its own time."""
    if rollout == "vllm" and task == "calculator":
        return VLLM_CALCULATOR_TARGETS
    return TARGETS[task]


def check(reports: dict[int, dict[str, Any]], task: str, rollout: str | None = None) -> list[str]:
    return [
        f"{'PASS' if all(test(r) for r in reports.values()) else 'FAIL'} {name}: "
        + ", ".join(f"seed {s} {'ok' if test(r) else 'missed'}" for s, r in reports.items())
        for name, test in targets_of(task, rollout)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="calculator", choices=sorted(TARGETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="default: outputs/quickstart_seeds (calculator), outputs/search_seeds")
    parser.add_argument("--rerun", action="store_true", help="run seeds that have a report")
    parser.add_argument("--agent-function", default=None,
                        help="train in agent mode with this agent (file.py:run)")
    parser.add_argument("--rollout", default=None,
                        help="the GRPO stage's backend variant (agentrl quickstart --rollout), "
                        "e.g. vllm")
    parser.add_argument("--server-python", default=None,
                        help="interpreter of the rollout's servers, e.g. .venv-vllm/bin/python")
    parser.add_argument("--mode", default="sync", choices=("sync", "one_step_off", "async"),
                        help="the GRPO stage's trainer.mode (runs go to OUT_DIR/[agent_]MODE_seed_N)")
    args = parser.parse_args()
    default = "quickstart_seeds" if args.task == "calculator" else f"{args.task}_seeds"
    out_dir = args.out_dir or Path("outputs") / default
    reports = worst_first({seed: run_seed(out_dir, args.task, seed, args.rerun, args.agent_function,
                                          args.rollout, args.server_python, args.mode)
                          for seed in args.seeds})  # fmt: skip
    worst, first = next(iter(reports.items()))
    sys.stdout.write(
        table(reports) + "\n\n" + "\n".join(check(reports, args.task, args.rollout)) + "\n"
        f"worst seed: {worst} (after GRPO {_pm(first['eval_rl'])})\n"
        + json.dumps(summary_line(reports)) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
