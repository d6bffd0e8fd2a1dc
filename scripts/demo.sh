#!/usr/bin/env bash
# Runs the kernlock demo on a fresh machine: installs what it needs into .venv, then runs examples/demo.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python examples/demo.py
