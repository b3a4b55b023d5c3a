#!/usr/bin/env bash
# The CPU ReTool run: a nano model learns when to run code, on 2 cores in minutes.
#   bash recipes/retool/run_cpu.sh OUT_DIR [--seed N] [agentrl quickstart flags/overrides]
# Sums of lists, products and sums of ranges (agentrl/tasks/code_arithmetic.py), the local
# code sandbox started and stopped by the command, SFT on an imperfect teacher (on some
# phrasings it answers without running code), GRPO with the real code_interpreter tool,
# accuracy on 300 held-out problems beside an SFT-only control.
# Writes OUT_DIR/report.json (eval_sft / eval_rl / control: accuracy,
# sandbox_runs_per_question, ...) and OUT_DIR/report.html.
set -euo pipefail
exec bash "$(dirname "$0")/../quickstart_task.sh" retool recipes/retool/run_cpu.sh "$@"
