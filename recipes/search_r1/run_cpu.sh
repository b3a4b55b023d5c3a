#!/usr/bin/env bash
# The CPU Search-R1 run: a nano model learns when to search, on 2 cores in minutes.
#   bash recipes/search_r1/run_cpu.sh OUT_DIR [--seed N] [agentrl quickstart flags/overrides]
# A synthetic corpus of facts about fictional people (one- and two-hop questions), a local
# BM25 retriever started and stopped by the command, SFT on an imperfect teacher, GRPO with
# the real search tool, exact match on 300 held-out questions beside an SFT-only control.
# Writes OUT_DIR/report.json (eval_sft / eval_rl / control: exact_match,
# searches_per_question, ...) and OUT_DIR/report.html.
set -euo pipefail
exec bash "$(dirname "$0")/../quickstart_task.sh" search recipes/search_r1/run_cpu.sh "$@"
