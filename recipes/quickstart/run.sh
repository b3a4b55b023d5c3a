#!/usr/bin/env bash
# The CPU quickstart: nano model -> SFT on an imperfect calculator teacher -> held-out
# evaluation -> GRPO with the calculator -> evaluation -> SFT-only control -> report.html.
#   bash recipes/quickstart/run.sh [--seed 1] [--steps 10] [key.sub=value ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${AGENTRL_VENV:-.venv}/bin/agentrl" quickstart --out-dir "${OUT_DIR:-outputs/quickstart}" "$@"
