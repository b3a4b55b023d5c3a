#!/usr/bin/env bash
# What every CPU recipe script runs: `agentrl quickstart --task TASK --out-dir OUT_DIR ...`
# with the checkout's venv (AGENTRL_VENV to choose another), else the agentrl on PATH (a
# wheel install). Called by recipes/*/run_cpu.sh as
#   exec bash "$(dirname "$0")/../quickstart_task.sh" TASK recipes/NAME/run_cpu.sh "$@"
set -euo pipefail
task=$1 script=$2
shift 2
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  echo "usage: bash $script OUT_DIR [--seed N] [...]" >&2
  exit 2
fi
out_dir=$1
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
agentrl="${AGENTRL_VENV:-$repo/.venv}/bin/agentrl"
[ -x "$agentrl" ] || agentrl=agentrl
exec "$agentrl" quickstart --task "$task" --out-dir "$out_dir" "$@"
