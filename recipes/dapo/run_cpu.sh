#!/usr/bin/env bash
# The CPU DAPO run: the calculator quickstart (nano model, SFT warm start, GRPO with the
# calculator, 256 held-out problems beside an SFT-only control) trained with DAPO's pieces:
# clip-higher (0.2 / 0.28), token-mean loss, the soft overlong penalty, and dynamic sampling
# (groups whose n samples all got the same reward are dropped and more batches generated).
#   bash recipes/dapo/run_cpu.sh OUT_DIR [--seed N] [agentrl quickstart flags/overrides]
# OUT_DIR/rl/metrics.jsonl shows the filtering per step: train/num_gen_batches,
# train/kept_prompt_ratio.
set -euo pipefail
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  echo "usage: bash recipes/dapo/run_cpu.sh OUT_DIR [--seed N] [...]" >&2
  exit 2
fi
out_dir=$1
shift
exec bash "$(dirname "$0")/../quickstart_task.sh" calculator recipes/dapo/run_cpu.sh "$out_dir" \
  "$@" \
  algorithm.filter_groups.enable=true \
  algorithm.filter_groups.metric=acc \
  algorithm.filter_groups.max_num_gen_batches=8 \
  actor_rollout_ref.actor.clip_ratio_low=0.2 \
  actor_rollout_ref.actor.clip_ratio_high=0.28 \
  actor_rollout_ref.actor.loss_agg_mode=token-mean \
  reward_model.reward_manager=dapo \
  +reward_model.reward_kwargs.max_resp_len=160 \
  +reward_model.reward_kwargs.overlong_buffer_cfg.enable=true \
  +reward_model.reward_kwargs.overlong_buffer_cfg.len=32 \
  +reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0 \
  +reward_model.reward_kwargs.overlong_buffer_cfg.log=true
