#!/usr/bin/env bash
# Installs everything the tests need (scripts/install.sh --test: into the active virtualenv, or .venv in
# the checkout), then runs the whole suite (browser tests included).
#   bash scripts/test.sh [PYTEST ARGS]          everything (CI)
#   bash scripts/test.sh --fast [PYTEST ARGS]   the unit tests: no AppTest, browser, real model, Ray or slow test
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
PY=$(bash scripts/install.sh --print-python)
# that Python's console scripts (attnviz, ray, lint-imports) come first on PATH, as in an activated venv
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
export PATH HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
if [ "${1:-}" = "--fast" ]; then
  shift
  exec "$PY" -m pytest -q -m "not (app or browser or real_model or ray or slow)" "$@"
fi
# the full suite on two workers (pytest-xdist), a test module per worker at a time (module fixtures such
# as the browser tests' server are made once); ATTNVIZ_TEST_WORKERS=0 runs it in this process
exec "$PY" -m pytest -q -n "${ATTNVIZ_TEST_WORKERS:-2}" --dist loadfile "$@"
