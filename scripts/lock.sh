#!/usr/bin/env bash
# Regenerate requirements/lock.txt: every transitive dependency of agentrl and of its
# extras that install on a CPU machine (test, agents, envs, lora, mcp, tensorboard, wandb), pinned
# for CPython 3.11 on x86_64 Linux. scripts/setup_env.sh, CI (.ci/run) and the wheel test
# install under it as pip constraints (-c), so a fresh machine gets the versions the docs'
# figures were measured with.
#
#   bash scripts/lock.sh          # needs uv (pip install uv); no network install happens
#
# torch is installed before the rest (scripts/setup_env.sh: the CPU build), so it and the
# CUDA packages that only PyPI's torch wheel pulls in (nvidia-*, cuda-*, triton) are left
# out of the lock; torch is pinned by the setup script to the build that is installed.
# Hashes are left out: pip does not take hashes in a constraints file.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${AGENTRL_LOCK_TORCH:-torch==2.13.0}
UV=${UV:-uv}
command -v "$UV" >/dev/null || { echo "scripts/lock.sh needs uv: pip install uv" >&2; exit 2; }
override=$(mktemp)
raw=$(mktemp)
trap 'rm -f "$override" "$raw"' EXIT
echo "$TORCH" > "$override"
"$UV" pip compile pyproject.toml \
  --extra test --extra agents --extra envs --extra lora --extra mcp --extra tensorboard --extra wandb \
  --python-version 3.11 --python-platform x86_64-unknown-linux-gnu \
  --override "$override" --no-header --quiet -o "$raw"
{
  echo "# requirements/lock.txt: made by scripts/lock.sh ($TORCH, CPython 3.11, x86_64 Linux);"
  echo "# do not edit. Used as pip constraints: pip install -c requirements/lock.txt ..."
  # drop torch and the CUDA-only packages with their '# via' lines
  awk '/^[A-Za-z0-9]/ { skip = ($0 ~ /^(torch|triton|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)==/) }
       !skip' "$raw"
} > requirements/lock.txt
echo "wrote requirements/lock.txt: $(grep -c '==' requirements/lock.txt) pins"
