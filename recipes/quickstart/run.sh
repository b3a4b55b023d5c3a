#!/usr/bin/env bash
# The CPU quickstart: tiny model -> SFT warm-up on calculator trajectories -> greedy
# evaluation -> GRPO with the calculator -> evaluation again; report in OUT_DIR/report.json.
#   bash recipes/quickstart/run.sh [--steps 10] [--size tiny] [key.sub=value ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${AGENTRL_VENV:-.venv}/bin/agentrl" quickstart --out-dir "${OUT_DIR:-outputs/quickstart}" "$@"
