#!/usr/bin/env bash
# Runs the whole test suite (and ruff) on a fresh machine: installs what it needs into .venv first, then the main
# suite and, beside it, the compatibility matrix (scripts/matrix.sh: every other set of tests/compat/matrix.toml in
# .matrix/<set>).
# With pytest arguments (a file, -k ...) only pytest runs them; KERNLOCK_MATRIX=0 skips the matrix.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# The tests expect this machine to be torch213-cxx11-cpu-x86_64-linux; bootstrap keeps a torch .venv already had.
.venv/bin/python -c "import sys, torch; sys.exit(not torch.__version__.startswith('2.13.'))" || {
  echo "scripts/test.sh: the tests run on torch 2.13 (CPU) and .venv has another; rm -rf .venv and run it again" >&2
  exit 1
}
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# kernlock's bytecode, as a pip-installed user has it (an editable install compiles nothing, and with
# PYTHONDONTWRITEBYTECODE=1 every process the tests start would compile kernlock's modules again: ~0.1 s each).
.venv/bin/python -m compileall -q kernlock
if [ $# -gt 0 ] || [ "${KERNLOCK_MATRIX:-1}" = 0 ]; then
  .venv/bin/mypy --strict kernlock
  exec .venv/bin/python -m pytest -q "$@"
fi
# mypy runs beside the tests (its output and verdict come after theirs).
typed=$(mktemp)
.venv/bin/mypy --strict kernlock >"$typed" 2>&1 &
mypy_pid=$!
trap 'kill $mypy_pid 2>/dev/null || true; rm -f "$typed"' EXIT
# The matrix (building its venvs with uv, then its tests, in two lanes) runs beside the tests below. Its output
# follows theirs.
.venv/bin/python -m pip install -q --disable-pip-version-check uv
log=$(mktemp)
# Its own process group (setsid -w: waits, passes the exit status on), so that an interrupt stops all of it.
setsid -w bash scripts/matrix.sh >"$log" 2>&1 &
matrix=$!
trap 'kill -- -$matrix 2>/dev/null || kill $matrix 2>/dev/null || true; kill $mypy_pid 2>/dev/null || true; rm -f "$log" "$typed"' EXIT
status=0
# First, one at a time beside the matrix (which has venvs of its own), the tests marked binds: a `kernlock run` binds
# this Python environment while it lasts, so a test beside it in another worker would load under its lock
# (tests/conftest.py checks the marker). Then the rest on every core (pytest-xdist), each test file whole in one
# worker, in its order (test_fuzz's budget check and the module-scoped fixtures expect that).
.venv/bin/python -m pytest -q -p no:cacheprovider -m binds || status=$?
.venv/bin/python -m pytest -q -n auto --dist loadfile -m "not binds" || status=$?
mypy_status=0
wait $mypy_pid || mypy_status=$?
echo "== mypy --strict kernlock (run beside the tests) =="
cat "$typed"
[ $mypy_status -eq 0 ] || status=$mypy_status
matrix_status=0
wait $matrix || matrix_status=$?
echo "== compatibility matrix (run beside the main suite, scripts/matrix.sh) =="
cat "$log"
[ $matrix_status -eq 0 ] || status=$matrix_status
exit $status
