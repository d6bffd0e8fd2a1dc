#!/usr/bin/env bash
# Creates .venv (if missing) with kernlock and the pinned test/demo working set installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch first and exactly pinned: a looser requirement may pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
# DS_BUILD_OPS=0: deepspeed (the launcher tests) installs without compiling its ops (no CUDA toolkit here).
DS_BUILD_OPS=0 .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
