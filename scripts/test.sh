#!/usr/bin/env bash
# Set up .venv (scripts/setup_env.sh) and run the whole test suite, slow end-to-end tests
# included, on every core: pytest-xdist workers (AGENTRL_TEST_WORKERS, default `auto`, one per
# core; 0 runs everything in this one process). Tests marked with one xdist_group run on one
# worker, one after another. Extra arguments go to pytest, e.g.
# `bash scripts/test.sh -m "not slow" -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec "${AGENTRL_VENV:-.venv}/bin/python" -m pytest -n "${AGENTRL_TEST_WORKERS:-auto}" \
  --dist loadgroup "$@"
