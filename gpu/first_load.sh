#!/usr/bin/env bash
# The first-load figure on a GPU machine (issue 12): run from the repository root, with the wheels of .whl/
# carried over (gpu/README.md says how). Prints the versions, then the tables of benchmarks/load.py and
# benchmarks/local.py as they print them.
set -euo pipefail
command -v git >/dev/null || { echo "git is needed (kernlock.testing serves git repositories)"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
unset HF_HUB_OFFLINE HF_HUB_DISABLE_TELEMETRY DO_NOT_TRACK KERNELS_CACHE LOCAL_KERNELS || true
python3 -m compileall -q kernlock /tmp/site >/dev/null  # installed packages start from bytecode; so do these
python3 - <<'PY'
import torch, kernels, kernlock, huggingface_hub
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
print(f"torch {torch.__version__} ({name}), kernels {kernels.__version__}, huggingface_hub "
      f"{huggingface_hub.__version__}, kernlock {kernlock.__version__}")
PY
cd benchmarks
echo "\$ python benchmarks/load.py --kernels 10 --repeats 15 --environments 26 --latency 0.02"
python3 load.py --kernels 10 --repeats 15 --environments 26 --latency 0.02 || true
echo
echo "\$ python benchmarks/local.py --runs 7"
python3 local.py --runs 7 || true
