#!/usr/bin/env bash
# Today's newest releases, the day they appear (not part of .ci/run): builds .matrix/newest with the newest
# transformers, kernels and huggingface_hub the package index serves (torch pinned to the machine's CPU build),
# prints the versions and the kernels loader generation kernlock claims for them, then runs the loader, activation
# and compatibility tests there (tests/functional/test_loaders.py, tests/functional/test_runtime.py, tests/compat).
#   bash scripts/newest.sh
# Exit status: 0 when the generation is known and every test passed; 1 otherwise (the summary says which).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/bootstrap.sh
[ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q --disable-pip-version-check uv
# torch==2.13.0 must be the CPU build from the machine's wheel folder (uv ignores pip.conf), as in scripts/matrix.sh.
FIND_LINKS=${UV_FIND_LINKS:-${PIP_FIND_LINKS:-$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)}}
[ -n "$FIND_LINKS" ] || { echo "newest.sh: no folder with torch's CPU wheel: set UV_FIND_LINKS" >&2; exit 2; }
venv=.matrix/newest
.venv/bin/uv venv -q --clear -p 3.11 "$venv"
.venv/bin/uv pip install -q -p "$venv/bin/python" --find-links "$FIND_LINKS" --upgrade \
  torch==2.13.0 transformers kernels huggingface_hub pytest hypothesis -e .
"$venv/bin/python" -m compileall -q kernlock
"$venv/bin/python" - <<'EOF'
import importlib.metadata as m
from kernlock.generations.catalog import for_kernels
from kernlock.runtime import loaders

print("== newest:", " ".join(f"{n}={m.version(n)}" for n in ("torch", "transformers", "kernels", "huggingface_hub")))
probe = loaders.probe()
print(f"== loader generation probed: {probe.generation} (kernels {probe.kernels})")
if for_kernels(probe.kernels) is None:
    print(f"== NEW: kernels {probe.kernels} is covered by no generation ({loaders.why_unknown(probe)})")
elif probe.missing:
    print(f"== NEW: the {for_kernels(probe.kernels).id} seams are not all there: {', '.join(probe.missing)}")
EOF
status=0
"$venv/bin/python" -c 'from kernlock.runtime import loaders; import sys; sys.exit(loaders.probe().generation == "unknown")' \
  || status=1
# tests/compat/test_compat_set.py skips when the installed versions match no set of tests/compat/matrix.toml.
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider tests/functional/test_loaders.py tests/functional/test_runtime.py \
  tests/compat --ignore=tests/compat/test_matrix_cross.py || status=1
echo "== newest.sh: $([ $status -eq 0 ] && echo 'known generation, every test passed' || echo 'FAILED: see above')"
exit $status
