#!/usr/bin/env bash
# Set up .venv (scripts/setup_env.sh) and run the main job on this machine's CPU:
# `agentrl quickstart` (a nano model, SFT on an imperfect teacher, GRPO with the calculator,
# held-out evaluation beside an SFT-only control, report.html). A few minutes on 2 idle cores
# (median 152 s on a set-up fresh clone, seed 0, 3 runs:
# bench/results/quickstart_fresh_clone_cpu_2026-11-28.json).
# Extra arguments go to `agentrl quickstart` (e.g. --seed 1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec "${AGENTRL_VENV:-.venv}/bin/agentrl" quickstart --out-dir outputs/quickstart "$@"
