#!/usr/bin/env bash
# Installs everything the tests need, then runs the whole suite (browser tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec ${PYTHON:-python3} -m pytest -q "$@"
