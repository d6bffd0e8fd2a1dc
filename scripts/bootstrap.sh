#!/usr/bin/env bash
# Creates .venv (if missing) with kernlock and the pinned test/demo working set installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch first, and only when .venv has none: the demo (scripts/demo.sh) runs on whatever torch is there, the tests
# on torch 2.13. The CPU build is asked for by its local version (+cpu), so that no index hands over the multi-GB CUDA
# build PyPI serves for Linux: from the configured indexes or wheel folder, else from PyTorch's CPU index.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "bootstrap: installing torch 2.13.0, its CPU build (about 200 MB, not PyPI's multi-GB CUDA build)" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0+cpu" 2>/dev/null ||
    .venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0+cpu" \
      --extra-index-url https://download.pytorch.org/whl/cpu
fi
# DS_BUILD_OPS=0: deepspeed (the launcher tests) installs without compiling its ops (no CUDA toolkit here).
DS_BUILD_OPS=0 .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
