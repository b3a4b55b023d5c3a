#!/usr/bin/env bash
# The environments recipe on CPU: the nano model learns reasoning-gym's basic_arithmetic
# with the calculator (SFT on an imperfect teacher, then GRPO; reasoning-gym scores every
# answer), beside the SFT-only control. Writes OUT_DIR/report.json (eval_sft, eval_rl,
# control: held-out accuracy with its standard error, by phrasing and number of terms).
#
#   bash recipes/envs/run_cpu.sh OUT_DIR [--seed N] [quickstart flags / overrides]
#
# Needs the envs extra (pip install 'agentrl[envs]'): reasoning-gym.
exec bash "$(dirname "$0")/../quickstart_task.sh" reasoning_gym recipes/envs/run_cpu.sh "$@"
