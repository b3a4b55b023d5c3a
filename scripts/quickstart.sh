#!/usr/bin/env bash
# Set up .venv (scripts/setup_env.sh) and run the main job on this machine's CPU: build a
# tiny model and an arithmetic dataset offline, then run the smoke pipeline (rollout ->
# reward -> advantage -> one policy update). Extra arguments go to `agentrl smoke`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec "${AGENTRL_VENV:-.venv}/bin/agentrl" smoke --out-dir outputs/smoke "$@"
