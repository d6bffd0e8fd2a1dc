#!/usr/bin/env bash
# The compatibility matrix (tests/compat/matrix.toml): builds every set but the main one (.venv) in .matrix/<set>
# with uv, runs the compatibility subset tests/compat/, every load path of its loader generation
# (tests/functional/test_loaders.py) and the set's extra-tests in each (the sets of other Pythons, without torch:
# tests/compat/test_pythons.py), then the tests that span sets (byte-identical locks from every loader generation and
# Python, pip's resolver beside every set).
#   bash scripts/matrix.sh            # every set
#   bash scripts/matrix.sh A E        # only these sets (and no cross-set tests unless every set was built)
# scripts/test.sh runs it beside the main suite; KERNLOCK_MATRIX=0 skips it there.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/bootstrap.sh
if [ ! -x .venv/bin/uv ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check uv
fi
UV=.venv/bin/uv
MATRIX_PY=tests/compat/compat_matrix.py
# torch==2.13.0 must be the CPU build from the machine's wheel folder: uv ignores pip.conf, and PyPI's torch 2.13.0
# is a multi-GB CUDA build. uv reads UV_FIND_LINKS itself; otherwise use pip's find-links (env or pip.conf).
FIND_LINKS=${UV_FIND_LINKS:-${PIP_FIND_LINKS:-$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)}}
if [ -z "$FIND_LINKS" ]; then
  echo "matrix.sh: no folder with torch's CPU wheel: set UV_FIND_LINKS (or pip's find-links)" >&2
  exit 2
fi
declare -a NAMES KINDS PYTHONS
while read -r name kind python; do
  if [ $# -eq 0 ] || [[ " $* " == *" $name "* ]]; then
    NAMES+=("$name")
    KINDS+=("$kind")
    PYTHONS+=("$python")
  fi
done < <(.venv/bin/python "$MATRIX_PY" plan)
[ ${#NAMES[@]} -gt 0 ] || { echo "matrix.sh: no such set: $*" >&2; exit 2; }

now() { date +%s.%N; }
since() { .venv/bin/python -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.0f}s')" "$1"; }
mkdir -p .matrix
started=$(now)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One set: build its venv with uv, run its tests. Writes $work/summary.NAME, and $work/failed.NAME when it fails.
run_set() {
  local name=$1 kind=$2 python=$3 venv=.matrix/$1 t0 t1 built versions result
  t0=$(now)
  mapfile -t args < <(.venv/bin/python "$MATRIX_PY" args "$name")
  "$UV" venv -q --clear -p "$python" "$venv"
  if [ "$kind" = lock-only ]; then
    "$UV" pip install -q -p "$venv/bin/python" "${args[@]}"
    "$UV" pip install -q -p "$venv/bin/python" --no-deps -e .
  elif [ "$kind" = python ]; then  # no torch: nothing may pull it in
    "$UV" pip install -q -p "$venv/bin/python" "${args[@]}" -e .
    if "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)'; then
      echo "matrix.sh: set $name must not hold torch" >&2
      touch "$work/failed.$name"
      return
    fi
  else
    "$UV" pip install -q -p "$venv/bin/python" --find-links "$FIND_LINKS" "${args[@]}" -e .
    "$venv/bin/python" - <<'PY'
import importlib.metadata as m
v = m.version("torch")
assert v.endswith("+cpu"), f"torch {v} is not the CPU build: check --find-links"
PY
  fi
  "$venv/bin/python" -m compileall -q kernlock  # kernlock's bytecode for this Python (an editable install has none)
  built=$(since "$t0")
  versions=$("$venv/bin/python" -c 'import importlib.metadata as m, sys
def v(n):
    try:
        return m.version(n)
    except m.PackageNotFoundError:
        return "-"
print(f"python={sys.version.split()[0]}", " ".join(f"{n}={v(n)}" for n in ("torch", "transformers", "kernels", "huggingface_hub")))')
  echo "== matrix set $name: $versions (built in $built)"
  result=ok
  mapfile -t tests < <(.venv/bin/python "$MATRIX_PY" tests "$name")
  if [ ${#tests[@]} -gt 0 ]; then
    t1=$(now)
    # full sets: tests/compat, every load path of the set's loader generation (tests/functional/test_loaders.py) and
    # its extra-tests; sets of other Pythons: tests/compat/test_pythons.py
    if ! KERNLOCK_MATRIX_SET=$name "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"; then
      touch "$work/failed.$name"
      result=FAILED
    fi
    result="$result, ${tests[*]} in $(since "$t1")"
  fi
  echo "$name: $result (built in $built)" >"$work/summary.$name"
}

# Lanes (KERNLOCK_MATRIX_LANES, default 2) take the sets in turn from one queue, newest loader generation first
# (the matrix lists them oldest first; the newest sets run the most tests): beside the main suite, and alone on every
# core once it is done. A lane claims a set by creating $work/claim.NAME (mkdir: one lane wins it).
lane() {
  local i
  for ((i = ${#NAMES[@]} - 1; i >= 0; i--)); do
    if mkdir "$work/claim.${NAMES[$i]}" 2>/dev/null; then
      set +e  # a set whose build fails stops there (its own set -e), and the lane goes on to the next
      (set -e && run_set "${NAMES[$i]}" "${KINDS[$i]}" "${PYTHONS[$i]}")
      [ $? -eq 0 ] || touch "$work/failed.${NAMES[$i]}"
      set -e
    fi
  done
}
lanes=()
for ((l = 1; l <= ${KERNLOCK_MATRIX_LANES:-2}; l++)); do
  lane >"$work/lane.$l" 2>&1 &
  lanes+=($!)
done
for pid in "${lanes[@]}"; do wait "$pid" || true; done
for ((l = 1; l <= ${KERNLOCK_MATRIX_LANES:-2}; l++)); do cat "$work/lane.$l"; done
failed=()
summary=()
for name in "${NAMES[@]}"; do
  if [ -e "$work/failed.$name" ] || [ ! -e "$work/summary.$name" ]; then failed+=("$name"); fi
  summary+=("$(cat "$work/summary.$name" 2>/dev/null || echo "$name: FAILED before its tests")")
done

# Byte-identical locks across loader generations and pip's resolver beside every set: need every set built.
if [ $# -eq 0 ]; then
  t1=$(now)
  if ! KERNLOCK_MATRIX_ROOT=$PWD/.matrix .venv/bin/python -m pytest -q -p no:cacheprovider tests/compat/test_matrix_cross.py; then
    failed+=("cross-set")
  fi
  summary+=("cross-set tests in $(since "$t1")")
fi

echo "== matrix, $(since "$started") in all:"
printf '   %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "matrix FAILED in: ${failed[*]}" >&2
  exit 1
fi
