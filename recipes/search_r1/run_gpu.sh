#!/usr/bin/env bash
# Search-R1 on one node of 8 GPUs: start a retriever over the corpus, wait for its /health,
# train Qwen2.5-3B with GRPO and the search tool (gpu_config.yaml), stop the retriever.
#
#   bash recipes/search_r1/run_gpu.sh DATA_DIR CORPUS [base|instruct|MODEL] [key.sub=value ...]
#
# DATA_DIR holds train.parquet and test.parquet and CORPUS is the {"id", "contents"} jsonl,
# both from examples/data_preprocess/search_r1.py (see recipes/search_r1/README.md). The
# model is Qwen/Qwen2.5-3B (base, the default), Qwen/Qwen2.5-3B-Instruct (instruct), or any
# model path. Further arguments are config overrides for `agentrl train`.
#
# Environment (defaults in brackets):
#   OUT_DIR            run directory: checkpoints, metrics.jsonl, logs [outputs/search_r1/EXPERIMENT]
#   EXPERIMENT         trainer.experiment_name [search_r1-qwen2.5-3b-MODEL-grpo]
#   INDEX_DIR          retriever index; built from CORPUS if missing or stale [CORPUS_DIR/index_KIND]
#   RETRIEVER_KIND     bm25 | dense [bm25]
#   DENSE_MODEL        encoder of a dense index [intfloat/e5-base-v2, Search-R1's retriever]
#   RETRIEVER_PORT     [8000]
#   RETRIEVER_TIMEOUT  seconds to wait for /health, index build included [7200]
#   AGENTRL_VENV       virtual environment holding agentrl [.venv; else agentrl on PATH]
#   AGENTRL_TRAIN_CMD  the training command [agentrl train]; tests put a stub here
#
# The retriever and the trainer each run in a process group of their own; on any exit
# (success, error, Ctrl-C, SIGTERM) both groups are stopped: SIGTERM, then SIGKILL after
# STOP_GRACE seconds [30]. A retriever that exits or does not answer /health in time stops
# the script with the tail of its log. The script must run without job control (`bash
# run_gpu.sh`, as above), so that `setsid` starts each group with the child's own pid.
set -euo pipefail

usage() {
  sed -n '5p' "$0" | sed 's/^#   /usage: /' >&2
  exit 2
}
die() {
  echo "run_gpu.sh: $*" >&2
  exit 1
}

[[ $# -ge 2 ]] || usage
[[ -d "$1" ]] || die "DATA_DIR $1 is not a directory"
[[ -f "$2" ]] || die "CORPUS $2 is not a file"
DATA_DIR=$(cd "$1" && pwd)
CORPUS="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
MODEL=base
if [[ $# -ge 3 && "$3" != *=* ]]; then
  MODEL=$3
  shift 3
else
  shift 2
fi
case "$MODEL" in
  base) MODEL_PATH=Qwen/Qwen2.5-3B; MODEL_TAG=base ;;
  instruct) MODEL_PATH=Qwen/Qwen2.5-3B-Instruct; MODEL_TAG=instruct ;;
  *) MODEL_PATH=$MODEL; MODEL_TAG=$(basename "$MODEL") ;;
esac
for split in train test; do
  [[ -f "$DATA_DIR/$split.parquet" ]] ||
    die "$DATA_DIR/$split.parquet is missing; write it with examples/data_preprocess/search_r1.py"
done

cd "$(dirname "$0")/../.."
VENV=${AGENTRL_VENV:-.venv}
if [[ -x "$VENV/bin/agentrl" ]]; then AGENTRL="$VENV/bin/agentrl"; else AGENTRL=agentrl; fi
read -r -a TRAIN_CMD <<<"${AGENTRL_TRAIN_CMD:-$AGENTRL train}"
EXPERIMENT=${EXPERIMENT:-search_r1-qwen2.5-3b-$MODEL_TAG-grpo}
OUT_DIR=${OUT_DIR:-outputs/search_r1/$EXPERIMENT}
RETRIEVER_KIND=${RETRIEVER_KIND:-bm25}
DENSE_MODEL=${DENSE_MODEL:-intfloat/e5-base-v2}
INDEX_DIR=${INDEX_DIR:-$(dirname "$CORPUS")/index_$RETRIEVER_KIND}
RETRIEVER_PORT=${RETRIEVER_PORT:-8000}
RETRIEVER_TIMEOUT=${RETRIEVER_TIMEOUT:-7200}
STOP_GRACE=${STOP_GRACE:-30}
HEALTH_URL="http://127.0.0.1:$RETRIEVER_PORT/health"

mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
RETRIEVER_LOG="$OUT_DIR/retriever.log"
TOOL_CONFIG="$OUT_DIR/search_tool.yaml"
sed "s#http://127.0.0.1:8000/retrieve#http://127.0.0.1:$RETRIEVER_PORT/retrieve#" \
  recipes/search_r1/search_tool.yaml >"$TOOL_CONFIG"
grep -q "127.0.0.1:$RETRIEVER_PORT/retrieve" "$TOOL_CONFIG" ||
  die "recipes/search_r1/search_tool.yaml has no retrieval_service_url on 127.0.0.1:8000"

# Stop a process group: SIGTERM, then SIGKILL if it outlives STOP_GRACE seconds.
stop_group() {
  local pgid=$1 name=$2 waited=0
  kill -0 -- "-$pgid" 2>/dev/null || return 0
  echo "run_gpu.sh: stopping the $name (process group $pgid)" >&2
  kill -TERM -- "-$pgid" 2>/dev/null || true
  while kill -0 -- "-$pgid" 2>/dev/null && ((waited < STOP_GRACE * 10)); do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 -- "-$pgid" 2>/dev/null; then
    echo "run_gpu.sh: the $name did not stop in ${STOP_GRACE}s; killing it" >&2
    kill -KILL -- "-$pgid" 2>/dev/null || true
  fi
}
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  [[ -z "${TRAIN_PID:-}" ]] || stop_group "$TRAIN_PID" trainer
  [[ -z "${RETRIEVER_PID:-}" ]] || stop_group "$RETRIEVER_PID" retriever
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

retriever_failed() {
  echo "run_gpu.sh: $*; the last lines of $RETRIEVER_LOG:" >&2
  tail -n 40 "$RETRIEVER_LOG" | sed 's/^/  | /' >&2
  exit 1
}

# A server already answering on the port would be taken for ours: refuse to start.
if curl -sf --max-time 2 "$HEALTH_URL" >/dev/null 2>&1; then
  die "a server already answers $HEALTH_URL; stop it or set RETRIEVER_PORT"
fi
retriever_args=(retriever --corpus "$CORPUS" --index-dir "$INDEX_DIR" --kind "$RETRIEVER_KIND"
  --port "$RETRIEVER_PORT" --topk 3)
[[ "$RETRIEVER_KIND" != dense ]] || retriever_args+=(--dense-model "$DENSE_MODEL")
setsid "$AGENTRL" "${retriever_args[@]}" >"$RETRIEVER_LOG" 2>&1 </dev/null &
RETRIEVER_PID=$!
echo "run_gpu.sh: retriever pid $RETRIEVER_PID on port $RETRIEVER_PORT (index $INDEX_DIR," \
  "log $RETRIEVER_LOG); waiting up to ${RETRIEVER_TIMEOUT}s for /health" >&2
deadline=$((SECONDS + RETRIEVER_TIMEOUT))
until curl -sf --max-time 5 "$HEALTH_URL" >/dev/null 2>&1; do
  kill -0 "$RETRIEVER_PID" 2>/dev/null || retriever_failed "the retriever exited before answering /health"
  ((SECONDS < deadline)) || retriever_failed "the retriever did not answer /health in ${RETRIEVER_TIMEOUT}s"
  sleep 1
done
kill -0 "$RETRIEVER_PID" 2>/dev/null || retriever_failed "another process answers $HEALTH_URL"
echo "run_gpu.sh: retriever ready: $(curl -sf --max-time 5 "$HEALTH_URL")" >&2

ulimit -n 65535 2>/dev/null || true  # thousands of concurrent engine and retriever connections
setsid "${TRAIN_CMD[@]}" --config recipes/search_r1/gpu_config.yaml \
  actor_rollout_ref.model.path="$MODEL_PATH" \
  data.train_files="$DATA_DIR/train.parquet" \
  data.val_files="$DATA_DIR/test.parquet" \
  actor_rollout_ref.rollout.multi_turn.tool_config_path="$TOOL_CONFIG" \
  trainer.experiment_name="$EXPERIMENT" \
  trainer.default_local_dir="$OUT_DIR" \
  "$@" &
TRAIN_PID=$!
status=0
wait "$TRAIN_PID" || status=$?
echo "run_gpu.sh: training exited with status $status" >&2
exit "$status"
