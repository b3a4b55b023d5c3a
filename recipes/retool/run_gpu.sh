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
# Commands and SANDBOX_ARGS are split on spaces (no quoting).
set -euo pipefail
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
# Each child gets its own process group, so stopping it stops what it spawned too.
own_group=()
command -v setsid >/dev/null 2>&1 && own_group=(setsid)

SANDBOX_URL=http://127.0.0.1:$SANDBOX_PORT
mkdir -p "$RUN_DIR"
SANDBOX_LOG=$RUN_DIR/sandbox.log
TOOL_CONFIG=recipes/retool/sandbox_tool.yaml
if [ "$SANDBOX_PORT" != 8080 ]; then
  TOOL_CONFIG=$RUN_DIR/sandbox_tool.yaml
  sed "s#127.0.0.1:8080#127.0.0.1:$SANDBOX_PORT#" recipes/retool/sandbox_tool.yaml > "$TOOL_CONFIG"
fi

sandbox_pid=""
train_pid=""

stop() {  # stop NAME PID: TERM what PID started (its process group), KILL it after 10 s
  local name=$1 target=$2
  [ -n "$target" ] || return 0
  [ ${#own_group[@]} -gt 0 ] && target=-$target
  kill -TERM -- "$target" 2>/dev/null || return 0
  echo "run_gpu.sh: stopping the $name (pid $2)" >&2
  for _ in $(seq 100); do
    kill -0 -- "$target" 2>/dev/null || return 0
    sleep 0.1
  done
  echo "run_gpu.sh: the $name did not stop after TERM; sending KILL" >&2
  kill -KILL -- "$target" 2>/dev/null || true
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop trainer "$train_pid"
  stop sandbox "$sandbox_pid"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if curl -s -o /dev/null --max-time 2 "$SANDBOX_URL/health"; then
  echo "run_gpu.sh: something already answers on $SANDBOX_URL; stop it or set SANDBOX_PORT" >&2
  exit 1
fi
${own_group[@]+"${own_group[@]}"} "${sandbox_cmd[@]}" --host 127.0.0.1 --port "$SANDBOX_PORT" \
  ${sandbox_args[@]+"${sandbox_args[@]}"} > "$SANDBOX_LOG" 2>&1 &
sandbox_pid=$!
echo "run_gpu.sh: sandbox pid $sandbox_pid on $SANDBOX_URL (log: $SANDBOX_LOG)" >&2
deadline=$((SECONDS + SANDBOX_START_TIMEOUT))
until curl -sf -o /dev/null --max-time 2 "$SANDBOX_URL/health"; do
  if ! kill -0 "$sandbox_pid" 2>/dev/null; then
    status=0
    wait "$sandbox_pid" || status=$?
    why="exited with status $status"
  elif [ "$SECONDS" -ge "$deadline" ]; then
    why="did not answer $SANDBOX_URL/health within ${SANDBOX_START_TIMEOUT} s"
  else
    sleep 0.5
    continue
  fi
  echo "run_gpu.sh: the sandbox $why; last lines of $SANDBOX_LOG:" >&2
  tail -n 30 "$SANDBOX_LOG" >&2
  exit 1
done
echo "run_gpu.sh: the sandbox answers; training" >&2

${own_group[@]+"${own_group[@]}"} "${train_cmd[@]}" --config recipes/retool/gpu_config.yaml \
  actor_rollout_ref.model.path="$MODEL_PATH" \
  data.train_files="$DATA_DIR/train.parquet" \
  data.val_files="$DATA_DIR/test.parquet" \
  actor_rollout_ref.rollout.multi_turn.tool_config_path="$TOOL_CONFIG" \
  trainer.default_local_dir="$RUN_DIR" \
  trainer.rollout_data_dir="$RUN_DIR/rollouts" \
  trainer.validation_data_dir="$RUN_DIR/validation" \
  "$@" &
train_pid=$!
echo "run_gpu.sh: trainer pid $train_pid" >&2
status=0
wait "$train_pid" || status=$?
[ "$status" -eq 0 ] || echo "run_gpu.sh: training exited with status $status" >&2
exit "$status"
