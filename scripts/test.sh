#!/usr/bin/env bash
# Runs the whole test suite (and ruff) on a fresh machine: installs what it needs into .venv first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest -q "$@"
