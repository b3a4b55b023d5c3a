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
#   RETRIEVER_HOST     the address the retriever listens on, written into the tool config: on
#                      several nodes this node's address that the others reach (every rank runs
#                      the search tool; examples/launch/ sets it to the head's) [127.0.0.1]
#   RETRIEVER_PORT     [8000]
#   RETRIEVER_TIMEOUT  seconds to wait for /health, index build included [7200]
#   AGENTRL_VENV       virtual environment holding agentrl [.venv; else agentrl on PATH]
#   AGENTRL_TRAIN_CMD  the training command [agentrl train]; tests put a stub here
#
# The retriever and the trainer each run in a process group of their own; on any exit
# (success, error, Ctrl-C, SIGTERM) both groups are stopped: SIGTERM, then SIGKILL after
# STOP_GRACE seconds [30]. A retriever that exits or does not answer /health in time stops
# the script with the tail of its log. Run it without job control (`bash run_gpu.sh`, as
# above); the lifecycle is recipes/services.sh's.
set -euo pipefail
source "$(dirname "$0")/../services.sh"

usage() {
  sed -n '5p' "$0" | sed 's/^#   /usage: /' >&2
  exit 2
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
RETRIEVER_HOST=${RETRIEVER_HOST:-127.0.0.1}
RETRIEVER_PORT=${RETRIEVER_PORT:-8000}
RETRIEVER_TIMEOUT=${RETRIEVER_TIMEOUT:-7200}
STOP_GRACE=${STOP_GRACE:-30}
case "$RETRIEVER_HOST" in
  0.0.0.0 | :: | "[::]") die "RETRIEVER_HOST=$RETRIEVER_HOST is not an address the ranks can call: set this node's address" ;;
  *:*) RETRIEVER_URL="http://[$RETRIEVER_HOST]:$RETRIEVER_PORT" ;;  # IPv6
  *) RETRIEVER_URL="http://$RETRIEVER_HOST:$RETRIEVER_PORT" ;;
esac
HEALTH_URL="$RETRIEVER_URL/health"

mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
RETRIEVER_LOG="$OUT_DIR/retriever.log"
TOOL_CONFIG="$OUT_DIR/search_tool.yaml"
sed "s#http://127.0.0.1:8000/retrieve#$RETRIEVER_URL/retrieve#" \
  recipes/search_r1/search_tool.yaml >"$TOOL_CONFIG"
grep -qF "$RETRIEVER_URL/retrieve" "$TOOL_CONFIG" ||
  die "recipes/search_r1/search_tool.yaml has no retrieval_service_url on 127.0.0.1:8000"

install_cleanup
retriever_args=(retriever --corpus "$CORPUS" --index-dir "$INDEX_DIR" --kind "$RETRIEVER_KIND"
  --host "$RETRIEVER_HOST" --port "$RETRIEVER_PORT" --topk 3)
[[ "$RETRIEVER_KIND" != dense ]] || retriever_args+=(--dense-model "$DENSE_MODEL")
say "retriever index $INDEX_DIR (built from $CORPUS if missing or stale)"
start_service retriever "$RETRIEVER_LOG" "$HEALTH_URL" "$RETRIEVER_TIMEOUT" RETRIEVER_PORT -- \
  "$AGENTRL" "${retriever_args[@]}"

ulimit -n 65535 2>/dev/null || true  # thousands of concurrent engine and retriever connections
run_trainer "${TRAIN_CMD[@]}" --config recipes/search_r1/gpu_config.yaml \
  actor_rollout_ref.model.path="$MODEL_PATH" \
  data.train_files="$DATA_DIR/train.parquet" \
  data.val_files="$DATA_DIR/test.parquet" \
  actor_rollout_ref.rollout.multi_turn.tool_config_path="$TOOL_CONFIG" \
  trainer.experiment_name="$EXPERIMENT" \
  trainer.default_local_dir="$OUT_DIR" \
  "$@"
