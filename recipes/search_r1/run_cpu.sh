#!/usr/bin/env bash
# The CPU Search-R1 run: a nano model learns when to search, on 2 cores in minutes.
#   bash recipes/search_r1/run_cpu.sh OUT_DIR [--seed N] [agentrl quickstart flags/overrides]
# A synthetic corpus of facts about fictional people (one- and two-hop questions), a local
# BM25 retriever started and stopped by the command, SFT on an imperfect teacher, GRPO with
# the real search tool, exact match on 300 held-out questions beside an SFT-only control.
# Writes OUT_DIR/report.json (eval_sft / eval_rl / control: exact_match,
# searches_per_question, ...) and OUT_DIR/report.html.
set -euo pipefail
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  echo "usage: bash recipes/search_r1/run_cpu.sh OUT_DIR [--seed N] [...]" >&2
  exit 2
fi
out_dir=$1
shift
# The checkout's venv (AGENTRL_VENV to choose another), else the agentrl on PATH (a wheel).
repo=$(cd "$(dirname "$0")/../.." && pwd)
agentrl="${AGENTRL_VENV:-$repo/.venv}/bin/agentrl"
[ -x "$agentrl" ] || agentrl=agentrl
exec "$agentrl" quickstart --task search --out-dir "$out_dir" "$@"
