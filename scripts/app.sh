#!/usr/bin/env bash
# Installs attnviz (scripts/install.sh: into the active virtualenv, or .venv in the checkout) and starts
# the app on the built-in model (http://127.0.0.1:8501, this machine only). Extra options go to `streamlit run`.
# To serve a class on the network use `attnviz app --serve --address ...` (docs/guide.md, "Serve a class safely").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PY=$(bash scripts/install.sh --print-python)
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
export PATH
exec "$PY" -m streamlit run app.py --server.address "${ATTNVIZ_ADDRESS:-127.0.0.1}" --server.headless true "$@"
