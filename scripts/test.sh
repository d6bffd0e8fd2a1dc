#!/usr/bin/env bash
# Runs the whole test suite (and ruff) on a fresh machine: installs what it needs into .venv first, then the
# compatibility matrix (scripts/matrix.sh: every other set of tests/compat/matrix.toml in .matrix/<set>).
# With pytest arguments (a file, -k ...) only pytest runs them; KERNLOCK_MATRIX=0 skips the matrix.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy --strict kernlock
if [ $# -gt 0 ] || [ "${KERNLOCK_MATRIX:-1}" = 0 ]; then
  exec .venv/bin/python -m pytest -q "$@"
fi
status=0
.venv/bin/python -m pytest -q || status=$?
bash scripts/matrix.sh || status=$?
exit $status
