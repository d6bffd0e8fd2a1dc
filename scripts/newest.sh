#!/usr/bin/env bash
# Today's newest releases, the day they appear (not part of .ci/run; CI never runs it): builds .matrix/newest with
# the newest transformers, kernels and huggingface_hub the package index serves (unpinned: the resolver picks them;
# torch pinned to the machine's 2.13.0 CPU build), prints the versions and the kernels loader generation kernlock
# probes for them, then runs the loader, activation and compatibility tests there (tests/functional/test_loaders.py,
# tests/functional/test_runtime.py, tests/compat but test_matrix_cross.py).
#   bash scripts/newest.sh
# Exit status: 0 when the probed generation is known and every test passed; 1 otherwise (the summary says which).
set -euo pipefail
cd "$(dirname "$0")/.."
unset KERNLOCK_MATRIX_SET KERNLOCK_MATRIX_ROOT  # the compat tests find the set (if any) from the installed versions
[ -x .venv/bin/python ] || bash scripts/bootstrap.sh
[ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q --disable-pip-version-check uv
# torch==2.13.0 must be the CPU build from the machine's wheel folder (uv ignores pip.conf), as in scripts/matrix.sh.
FIND_LINKS=${UV_FIND_LINKS:-${PIP_FIND_LINKS:-$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)}}
[ -n "$FIND_LINKS" ] || { echo "newest.sh: no folder with torch's CPU wheel: set UV_FIND_LINKS" >&2; exit 2; }
started=$SECONDS
venv=.matrix/newest
.venv/bin/uv venv -q --clear -p 3.11 "$venv"
.venv/bin/uv pip install -q -p "$venv/bin/python" --find-links "$FIND_LINKS" --upgrade \
  torch==2.13.0 transformers kernels huggingface_hub pytest hypothesis -e .
"$venv/bin/python" -c 'import importlib.metadata as m; v = m.version("torch"); assert v.endswith("+cpu"), f"torch {v}"'
"$venv/bin/python" -m compileall -q kernlock

status=0
report=$("$venv/bin/python" - <<'EOF'
import importlib.metadata as m
import sys

from kernlock.generations.catalog import for_kernels
from kernlock.runtime import loaders

sys.path.insert(0, "tests/compat")
import compat_matrix

print("versions:", " ".join(f"{n}={m.version(n)}" for n in ("torch", "transformers", "kernels", "huggingface_hub")))
probe = loaders.probe()
print(f"generation: {probe.generation} (kernels {probe.kernels})")
claimed = for_kernels(probe.kernels)
if claimed is None:
    print(f"NEW: kernels {probe.kernels} is not covered by any generation: {loaders.why_unknown(probe)}")
elif probe.missing:
    print(f"NEW: kernels {probe.kernels} is in {claimed.id}'s range but lacks {', '.join(probe.missing)}")
chosen = compat_matrix.current()
print(f"matrix set: {chosen.name}" if chosen else
      "matrix set: none matches these versions (tests/compat/test_compat_set.py skips: expected for a new release)")
EOF
) || status=1
sed 's/^/== /' <<<"$report"
generation=$(sed -n 's/^generation: \([^ ]*\).*/\1/p' <<<"$report")
case $generation in "" | unknown | None) status=1 ;; esac  # None: kernels is not installed

log=$venv/pytest.log
"$venv/bin/python" -m pytest -q -rfEs -p no:cacheprovider tests/functional/test_loaders.py \
  tests/functional/test_runtime.py tests/compat --ignore=tests/compat/test_matrix_cross.py 2>&1 | tee "$log" || status=1
tests=$(tail -n 1 "$log" | sed 's/^=* *//; s/ *=*$//')

echo "== newest.sh, $((SECONDS - started))s: generation ${generation:-?} probed; tests: $tests"
grep -E '^(NEW|matrix set: none)' <<<"$report" | sed 's/^/== /' || true
echo "== newest.sh: $([ $status -eq 0 ] && echo 'known generation, every test passed' || echo 'FAILED: see above')"
exit $status
