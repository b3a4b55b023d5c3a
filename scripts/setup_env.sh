#!/usr/bin/env bash
# Create the virtual environment .venv (once) and install agentrl into it with its test
# extras, every dependency at the version requirements/lock.txt pins (scripts/lock.sh
# regenerates it). Safe to re-run. Environment knobs:
#   PYTHON=python3.11          interpreter that creates the venv (default: python3)
#   AGENTRL_VENV=.venv         where the venv lives
#   AGENTRL_TORCH_SPEC=...     torch to install first when the venv has none
#                              (default torch==2.13.0: the CPU build only where pip finds
#                              a local CPU wheel; on stock PyPI it is the CUDA build, so
#                              install torch from https://download.pytorch.org/whl/cpu
#                              into the venv first; a torch already there is kept)
#   AGENTRL_EXTRAS=test        the extras to install (any of the locked ones, comma-separated)
#   AGENTRL_LOCK=requirements/lock.txt   the pins (empty: resolve freely, unlocked)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${AGENTRL_VENV:-.venv}
TORCH_SPEC=${AGENTRL_TORCH_SPEC:-torch==2.13.0}
EXTRAS=${AGENTRL_EXTRAS:-test}
LOCK=${AGENTRL_LOCK-requirements/lock.txt}

if [ ! -x "$VENV/bin/python" ]; then
  echo "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip

# torch goes in first and alone: left to resolve it as a dependency, pip would pick a
# multi-GB CUDA build. Everything after is pinned to the torch that is installed.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "installing $TORCH_SPEC"
  "$VENV/bin/pip" install -q --disable-pip-version-check "$TORCH_SPEC"
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$VENV/bin/python" -c "import torch; print('torch==' + torch.__version__)" > "$constraints"
locked=()
if [ -n "$LOCK" ]; then
  locked=(-c "$LOCK")
fi
echo "installing agentrl[$EXTRAS] (editable) with $(cat "$constraints")${LOCK:+, pinned by $LOCK}"
"$VENV/bin/pip" install -q --disable-pip-version-check -c "$constraints" "${locked[@]}" \
  -e ".[$EXTRAS]"
