#!/usr/bin/env bash
# Set up .venv (scripts/setup_env.sh) and run the whole test suite, slow end-to-end tests
# included: in this one process by default, or on AGENTRL_TEST_WORKERS pytest-xdist workers (a
# number, or `auto`: one per core). The end-to-end tests are scheduled first
# (tests/conftest.py) and tests that share a module's servers go to one worker
# (xdist_group). Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow" -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec "${AGENTRL_VENV:-.venv}/bin/python" -m pytest -n "${AGENTRL_TEST_WORKERS:-0}" \
  --dist loadgroup "$@"
