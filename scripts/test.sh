#!/usr/bin/env bash
# Set up .venv (scripts/setup_env.sh) and run the whole test suite, slow end-to-end tests
# included. AGENTRL_TEST_WORKERS=auto (or a number) spreads it over pytest-xdist workers; the
# default, 0, runs it in this one process: under xdist two code-sandbox servers of different
# workers share their per-run uids and end each other's runs (docs/sandbox.md). Extra
# arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow" -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec "${AGENTRL_VENV:-.venv}/bin/python" -m pytest -n "${AGENTRL_TEST_WORKERS:-0}" \
  --dist loadgroup "$@"
