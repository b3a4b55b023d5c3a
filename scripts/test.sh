#!/usr/bin/env bash
# Set up .venv (scripts/setup_env.sh) and run the whole test suite, slow end-to-end tests
# included, on pytest-xdist workers: AGENTRL_TEST_WORKERS of them (default 2; `auto`: one per
# core; 0: everything in this one process). The end-to-end tests are scheduled first
# (tests/conftest.py) and tests that share a module's servers go to one worker
# (xdist_group). Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow" -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec "${AGENTRL_VENV:-.venv}/bin/python" -m pytest -n "${AGENTRL_TEST_WORKERS:-2}" \
  --dist loadgroup "$@"
