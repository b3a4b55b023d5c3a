#!/usr/bin/env bash
# Set up .venv (scripts/setup_env.sh) and run the whole test suite, slow end-to-end tests
# included. Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow" -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec "${AGENTRL_VENV:-.venv}/bin/python" -m pytest "$@"
