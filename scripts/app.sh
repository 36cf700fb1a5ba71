#!/usr/bin/env bash
# Installs attnviz and starts the app on the built-in model (http://127.0.0.1:8501).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec ${PYTHON:-python3} -m streamlit run app.py --server.address "${ATTNVIZ_ADDRESS:-127.0.0.1}" --server.headless true "$@"
