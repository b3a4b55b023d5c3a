#!/usr/bin/env bash
# The environments recipe on CPU: the nano model trained on two environments from other
# libraries, each by SFT on an imperfect teacher then GRPO, beside its SFT-only control:
#   1. reasoning-gym's basic_arithmetic with the calculator (reasoning-gym scores every
#      answer)                                       -> OUT_DIR/reasoning_gym/report.json
#   2. TextArena's Blackjack-v0, a game that answers every move (the game's reward, the
#      share of its 5 hands won)                     -> OUT_DIR/blackjack/report.json
# Each report has eval_sft, eval_rl and control: held-out score with its standard error.
#
#   bash recipes/envs/run_cpu.sh OUT_DIR [--seed N] [quickstart flags / overrides]
#   AGENTRL_ENVS_TASKS=blackjack bash recipes/envs/run_cpu.sh OUT_DIR ...   # one of the two
#
# Needs the envs extra (pip install 'agentrl[envs]'): reasoning-gym and textarena.
set -euo pipefail
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  echo "usage: bash recipes/envs/run_cpu.sh OUT_DIR [--seed N] [...]" >&2
  exit 2
fi
out_dir=$1
shift
for task in ${AGENTRL_ENVS_TASKS:-reasoning_gym blackjack}; do
  case $task in
    reasoning_gym | blackjack) ;;
    *) echo "AGENTRL_ENVS_TASKS: unknown task '$task' (reasoning_gym, blackjack)" >&2; exit 2 ;;
  esac
  bash "$(dirname "$0")/../quickstart_task.sh" "$task" recipes/envs/run_cpu.sh \
    "$out_dir/$task" "$@"
done
