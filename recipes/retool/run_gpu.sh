#!/usr/bin/env bash
# ReTool-style GRPO on one node of 8 GPUs: starts `agentrl sandbox` in the background, waits
# for its /health, trains with recipes/retool/gpu_config.yaml, and stops everything it
# started on exit, Ctrl-C or TERM. A sandbox that does not come up stops the script (exit 1)
# with the tail of its log.
#
#   MODEL_PATH=/models/Qwen2.5-7B-Instruct DATA_DIR=~/data/retool \
#     bash recipes/retool/run_gpu.sh [key.sub=value ...]      # extra config overrides
#
# Environment (default):
#   CONFIG                 recipes/retool/gpu_config.yaml (recipes/dapo/gpu_config.yaml: DAPO)
#   MODEL_PATH             Qwen/Qwen2.5-7B-Instruct (better: a cold-start SFT checkpoint, README.md)
#   DATA_DIR               $HOME/data/retool: train.parquet, test.parquet from
#                          examples/data_preprocess/retool.py
#   RUN_DIR                outputs/retool_gpu: checkpoints, metrics.jsonl, rollouts/, sandbox.log
#   SANDBOX_PORT           8080 (the tool config is rewritten into RUN_DIR for another port)
#   SANDBOX_ARGS           "--max-concurrent 32": more `agentrl sandbox` options (docs/sandbox.md)
#   SANDBOX_START_TIMEOUT  60: seconds to wait for the sandbox's /health
#   AGENTRL_BIN            ${AGENTRL_VENV:-.venv}/bin/agentrl
#   AGENTRL_SANDBOX_CMD    "$AGENTRL_BIN sandbox" (--host, --port, SANDBOX_ARGS are appended)
#   AGENTRL_TRAIN_CMD      "$AGENTRL_BIN train" (the tests put a stub trainer here)
#   STOP_GRACE             10: seconds between TERM and KILL when stopping what it started
# Commands and SANDBOX_ARGS are split on spaces (no quoting). The sandbox and the trainer
# each run in a process group of their own (the lifecycle is recipes/services.sh's).
set -euo pipefail
source "$(dirname "$0")/../services.sh"
cd "$(dirname "$0")/../.."

AGENTRL_BIN=${AGENTRL_BIN:-${AGENTRL_VENV:-.venv}/bin/agentrl}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/retool}
RUN_DIR=${RUN_DIR:-outputs/retool_gpu}
SANDBOX_PORT=${SANDBOX_PORT:-8080}
SANDBOX_ARGS=${SANDBOX_ARGS---max-concurrent 32}
SANDBOX_START_TIMEOUT=${SANDBOX_START_TIMEOUT:-60}
read -r -a sandbox_cmd <<< "${AGENTRL_SANDBOX_CMD:-$AGENTRL_BIN sandbox}"
read -r -a sandbox_args <<< "$SANDBOX_ARGS"
read -r -a train_cmd <<< "${AGENTRL_TRAIN_CMD:-$AGENTRL_BIN train}"
STOP_GRACE=${STOP_GRACE:-10}

SANDBOX_URL=http://127.0.0.1:$SANDBOX_PORT
mkdir -p "$RUN_DIR"
SANDBOX_LOG=$RUN_DIR/sandbox.log
TOOL_CONFIG=recipes/retool/sandbox_tool.yaml
if [ "$SANDBOX_PORT" != 8080 ]; then
  TOOL_CONFIG=$RUN_DIR/sandbox_tool.yaml
  sed "s#127.0.0.1:8080#127.0.0.1:$SANDBOX_PORT#" recipes/retool/sandbox_tool.yaml > "$TOOL_CONFIG"
fi

install_cleanup
start_service sandbox "$SANDBOX_LOG" "$SANDBOX_URL/health" "$SANDBOX_START_TIMEOUT" SANDBOX_PORT \
  -- "${sandbox_cmd[@]}" --host 127.0.0.1 --port "$SANDBOX_PORT" \
  ${sandbox_args[@]+"${sandbox_args[@]}"}

run_trainer "${train_cmd[@]}" --config "${CONFIG:-recipes/retool/gpu_config.yaml}" \
  actor_rollout_ref.model.path="$MODEL_PATH" \
  data.train_files="$DATA_DIR/train.parquet" \
  data.val_files="$DATA_DIR/test.parquet" \
  actor_rollout_ref.rollout.multi_turn.tool_config_path="$TOOL_CONFIG" \
  trainer.default_local_dir="$RUN_DIR" \
  trainer.rollout_data_dir="$RUN_DIR/rollouts" \
  trainer.validation_data_dir="$RUN_DIR/validation" \
  "$@"
