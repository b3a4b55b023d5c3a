#!/usr/bin/env bash
#SBATCH --job-name=agentrl-search-r1
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --exclusive
#SBATCH --output=%x-%j.log
# Search-R1 (recipes/search_r1) on a Slurm allocation of several GPU nodes: a Ray head on the
# first node, a Ray worker on each of the others (one job step per node), and the recipe's
# run_gpu.sh (retriever + `agentrl train`) on the first node, where Slurm runs this script,
# with the allocation's node count and GPUs per node as trainer.nnodes and
# trainer.n_gpus_per_node and the head as ray_init.address.
#
#   sbatch --nodes=2 --gpus-per-node=8 examples/launch/slurm_search_r1.sh DATA_DIR CORPUS [base|instruct|MODEL] [key.sub=value ...]
#   DRY_RUN=1 SLURM_JOB_NODELIST=gpu1,gpu2 GPUS_PER_NODE=8 bash examples/launch/slurm_search_r1.sh DATA_DIR CORPUS
#
# The arguments are run_gpu.sh's (recipes/search_r1/README.md); the overrides above come after
# them and win. The #SBATCH lines are defaults: --cpus-per-task is the CPUs of each node's one
# Ray task (Ray gets them all), so set it to your nodes' core count, and add your site's
# partition, account and time limit. Run sbatch from the repository root: Slurm runs a copy of
# this file, so the root is SLURM_SUBMIT_DIR. The repository, its .venv and the run directory
# (run_gpu.sh's OUT_DIR: checkpoints are written by every rank) must be on a filesystem that
# every node sees (docs/scale.md).
#
# Token authentication: every Ray process of the job (the head, the workers, the trainer and
# its ranks) runs with RAY_AUTH_MODE=token and the same RAY_AUTH_TOKEN, which srun passes to
# every step in its environment. Without one in the environment (RAY_AUTH_TOKEN, or a file
# in RAY_AUTH_TOKEN_PATH) the job makes a new random one.
#
# Environment (defaults in brackets):
#   GPUS_PER_NODE      GPUs per node [SLURM_GPUS_ON_NODE, which --gpus-per-node sets]
#   RAY_PORT           the head's GCS port [6379]
#   HEAD_IP            the address the other nodes reach the head at [the first node's
#                      `hostname --ip-address`, its first IPv4 address]
#   RAY_START_TIMEOUT  seconds to wait for the head to answer [120]
#   AGENTRL_ROOT       the repository [SLURM_SUBMIT_DIR, else the one holding this file]
#   AGENTRL_VENV       virtual environment holding agentrl and Ray [.venv; else ray on PATH]
#   DRY_RUN=1          print what each node would run, as "[NODE] command", and run nothing
#                      (with SLURM_JOB_NODELIST set by hand: gpu1,gpu2 or gpu[1-2])
# run_gpu.sh's own settings (OUT_DIR, EXPERIMENT, RETRIEVER_*, ...) reach it unchanged, but
# RETRIEVER_HOST defaults to HEAD_IP: the retriever runs on the head, and the search tool in
# every rank, on every node, calls it there.
#
# On exit (the trainer's, an error, scancel's SIGTERM) the Ray steps are stopped:
# recipes/services.sh's lifecycle, as in run_gpu.sh.
set -euo pipefail

ROOT=${AGENTRL_ROOT:-${SLURM_SUBMIT_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}}
[[ -f "$ROOT/recipes/search_r1/run_gpu.sh" ]] ||
  { echo "${0##*/}: $ROOT is not the agentrl repository; sbatch from its root or set AGENTRL_ROOT" >&2; exit 2; }
cd "$ROOT"
# shellcheck source=recipes/services.sh
source recipes/services.sh

if [[ $# -lt 2 ]]; then
  echo "usage: sbatch [--nodes=N --gpus-per-node=G] examples/launch/slurm_search_r1.sh DATA_DIR CORPUS [base|instruct|MODEL] [key.sub=value ...]" >&2
  exit 2
fi
DRY_RUN=${DRY_RUN:-0}
RAY_PORT=${RAY_PORT:-6379}
RAY_START_TIMEOUT=${RAY_START_TIMEOUT:-120}
VENV=${AGENTRL_VENV:-.venv}
if [[ -x "$VENV/bin/ray" ]]; then RAY="$VENV/bin/ray"; else RAY=ray; fi

# The allocation's nodes, the first one the head.
[[ -n "${SLURM_JOB_NODELIST:-}" ]] || die "SLURM_JOB_NODELIST is not set: submit with sbatch"
if [[ "$SLURM_JOB_NODELIST" != *[* ]]; then  # a plain list: n1,n2
  IFS=, read -r -a NODES <<<"$SLURM_JOB_NODELIST"
else
  command -v scontrol >/dev/null || die "scontrol not found: it expands SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST"
  mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
fi
[[ ${#NODES[@]} -gt 0 ]] || die "no nodes in SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST"
NNODES=${#NODES[@]}
HEAD=${NODES[0]}
GPUS_PER_NODE=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}
[[ "$GPUS_PER_NODE" =~ ^[1-9][0-9]*$ ]] ||
  die "GPUs per node unknown (got '${GPUS_PER_NODE}'): submit with --gpus-per-node=G or set GPUS_PER_NODE"
RESOURCES=(--num-gpus="$GPUS_PER_NODE")  # what each node's Ray offers: its GPUs, and its task's CPUs
[[ -z "${SLURM_CPUS_PER_TASK:-}" ]] || RESOURCES+=(--num-cpus="$SLURM_CPUS_PER_TASK")

# on_node NODE CMD...: run CMD as a one-task job step on NODE in the background, stopped on
# exit; with DRY_RUN=1 print it as "[NODE] CMD".
on_node() {
  local node=$1
  shift
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '[%s]' "$node"
    printf ' %q' "$@"
    printf '\n'
    return
  fi
  spawn "Ray node $node" srun --nodes=1 --ntasks=1 -w "$node" "$@"
}

# first_ipv4 NODE: the first IPv4 address `hostname --ip-address` gives on NODE (else its first).
first_ipv4() {
  srun --nodes=1 --ntasks=1 -w "$1" hostname --ip-address |
    awk '{ for (i = 1; i <= NF; i++) if ($i !~ /:/) { print $i; exit } print $1; exit }'
}

if [[ -z "${HEAD_IP:-}" ]]; then
  if [[ "$DRY_RUN" == 1 ]]; then HEAD_IP=$HEAD; else HEAD_IP=$(first_ipv4 "$HEAD"); fi
fi
ADDRESS="$HEAD_IP:$RAY_PORT"

export RAY_AUTH_MODE=token
if [[ -n "${RAY_AUTH_TOKEN:-}" ]]; then
  token_from="RAY_AUTH_TOKEN from the environment"
elif [[ -n "${RAY_AUTH_TOKEN_PATH:-}" ]]; then
  token_from="the file RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_PATH"
else
  RAY_AUTH_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  export RAY_AUTH_TOKEN
  token_from="a new random RAY_AUTH_TOKEN for this job"
fi
say "$NNODES nodes x $GPUS_PER_NODE GPUs, Ray head $HEAD at $ADDRESS; RAY_AUTH_MODE=token with $token_from"
if [[ "$DRY_RUN" == 1 ]]; then
  printf '[all] export RAY_AUTH_MODE=token  # token: %s (not shown)\n' "$token_from"
fi

install_cleanup
on_node "$HEAD" "$RAY" start --head --node-ip-address="$HEAD_IP" --port="$RAY_PORT" \
  "${RESOURCES[@]}" --block
if [[ "$DRY_RUN" != 1 ]]; then
  head_pid=$SPAWNED_PID
  deadline=$((SECONDS + RAY_START_TIMEOUT))
  until "$RAY" status --address="$ADDRESS" >/dev/null 2>&1; do
    kill -0 "$head_pid" 2>/dev/null || die "the Ray head on $HEAD exited; see the job's log"
    ((SECONDS < deadline)) || die "the Ray head did not answer at $ADDRESS within ${RAY_START_TIMEOUT} s"
    sleep 2
  done
  say "the Ray head answers at $ADDRESS"
fi
for node in "${NODES[@]:1}"; do
  on_node "$node" "$RAY" start --address="$ADDRESS" "${RESOURCES[@]}" --block
done

# The trainer's placement groups wait for the workers to join (docs/scale.md).
ENTRY=(env "RETRIEVER_HOST=${RETRIEVER_HOST:-$HEAD_IP}" bash recipes/search_r1/run_gpu.sh "$@"
  trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$GPUS_PER_NODE" ray_init.address="$ADDRESS")
if [[ "$DRY_RUN" == 1 ]]; then
  printf '[%s]' "$HEAD"
  printf ' %q' "${ENTRY[@]}"
  printf '\n'
  exit 0
fi
run_trainer "${ENTRY[@]}"
