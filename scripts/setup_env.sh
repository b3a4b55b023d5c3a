#!/usr/bin/env bash
# Create the virtual environment .venv (once) and install agentrl into it with its test
# extras. Safe to re-run. Environment knobs:
#   PYTHON=python3.11          interpreter that creates the venv (default: python3)
#   AGENTRL_VENV=.venv         where the venv lives
#   AGENTRL_TORCH_SPEC=...     torch to install first when the venv has none
#                              (default torch==2.13.0, the CPU build; on a GPU machine
#                              install your CUDA torch into the venv first, it is kept)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${AGENTRL_VENV:-.venv}
TORCH_SPEC=${AGENTRL_TORCH_SPEC:-torch==2.13.0}

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
echo "installing agentrl (editable) with $(cat "$constraints")"
"$VENV/bin/pip" install -q --disable-pip-version-check -c "$constraints" -e ".[test]"
