"""From an empty cache to the first finished training step: the TRL page's "kernels ready in about 2.5 seconds".

    python benchmarks/ready.py [--so-mib 400] [--repeats 3] [--triton] [--json F]

A local Hub serves ``kernels-community/flash-attn2`` v2 with one build for this machine whose files weigh what a
real build does: the sample attention build with a ``--so-mib`` MiB compiled library beside it (a real
flash-attn2 build carries a ``.so`` of hundreds of MiB); with ``--triton`` (a CUDA machine, gpu/README.md) the
Triton FlashAttention build of ``gpu/build_triton_kernel.py`` instead, with a file of the same size standing for
the compiled library it does not need. Then, each row from empty caches, median of ``--repeats``:

* **kernlock**: `kernlock sync` (a process: lock read, download, hashes, signature) and then the training process:
  ``import kernlock.activate``, ``kernels.get_kernel(repo, version=2)`` (the locked build, no request), and a
  training step of a small Llama whose attention is that build's ``flash_attn_func`` (registered with
  transformers' ``AttentionInterface``);
* **plain kernels**: the same training process without kernlock: its ``get_kernel`` downloads the same bytes from
  the same server.

Printed per row: the time to the build being loaded ("ready": sync + the process up to ``get_kernel`` returning,
for kernlock; the process includes importing torch and transformers), the first training step, the second one,
and "done", from the empty cache to the first finished step: the first step's excess over the second is the
first-call cost, for the Triton build its JIT compile (Triton's cache is emptied before each row; it lives
outside the lock, docs/check.md says what that means). The ratio kernlock / plain of "ready" is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import compile_bytecode, free_port, in_scratch_folder, use_local_hub

ROOT = Path(__file__).resolve().parent.parent
REPO = "kernels-community/flash-attn2"

#: The training process of both rows: argv[1] "kernlock" activates the lock first; prints one JSON line.
TRAIN = r"""
import json, sys, time
start = time.perf_counter()
if sys.argv[1] == "kernlock":
    import kernlock.activate
import kernels, torch
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM

t0 = time.perf_counter()
build = kernels.get_kernel(sys.argv[2], version=2)
loaded = time.perf_counter()
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    out = build.flash_attn_func(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), softmax_scale=scaling, causal=True
    )
    return out, None


AttentionInterface.register("locked_kernel", attention)
big = device == "cuda"
config = LlamaConfig(
    vocab_size=32000 if big else 256, hidden_size=2048 if big else 128, intermediate_size=5632 if big else 256,
    num_hidden_layers=4 if big else 2, num_attention_heads=16 if big else 4, num_key_value_heads=4 if big else 2,
    max_position_embeddings=2048, attn_implementation="locked_kernel",
)
torch.manual_seed(0)
model = LlamaForCausalLM(config).to(device=device, dtype=dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, config.vocab_size, (8 if big else 2, 2048 if big else 256), device=device)
steps = []
for _ in range(2):
    t = time.perf_counter()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    steps.append(time.perf_counter() - t)
print(json.dumps({
    "imports_s": t0 - start, "get_kernel_s": loaded - t0, "first_step_s": steps[0], "second_step_s": steps[1],
    "to_loaded_s": loaded - start, "calls": sum(build.CALL_COUNTS.values()), "device": device,
}))
"""


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--so-mib", type=int, default=400, help="the build's compiled library in MiB (default 400)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per row, median printed (default 3)")
    parser.add_argument("--triton", action="store_true", help="serve gpu/'s Triton build (a CUDA machine)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    return parser.parse_args()


def main() -> int:
    args = _args()
    return in_scratch_folder("kernlock-bench-ready-", lambda work: _run(args, work))


def _serve(hub: Path, variant: str, args: argparse.Namespace) -> None:
    """flash-attn2 v2 with one real-size build for ``variant``."""
    from kernlock.testing import create_kernel_repo

    size = args.so_mib * 2**20
    if not args.triton:
        create_kernel_repo(hub, REPO, {"v2": [variant]}, kind="attention", so_size=size, python_builds=[variant])
        return
    sys.path.insert(0, str(ROOT / "gpu"))
    from build_triton_kernel import serve_on_hub

    serve_on_hub(hub, repo=REPO, pad=size)


def _fresh(work: Path) -> None:
    for name in ("hf-cache", "kernlock-own", "triton-cache"):
        shutil.rmtree(work / name, ignore_errors=True)


def _train(work: Path, mode: str, env: dict[str, str]) -> dict[str, float]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", TRAIN, mode, REPO], cwd=work / "project", env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the {mode} training process failed:\n{done.stderr[-4000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if not figures["calls"]:
        raise SystemExit(f"the {mode} process never called the build's flash_attn_func")
    return {**figures, "process_s": wall}


def _run(args: argparse.Namespace, work: Path) -> int:
    port = free_port()
    use_local_hub(work, port, TRITON_CACHE_DIR=str(work / "triton-cache"))
    compile_bytecode()
    from kernlock import api
    from kernlock.environments.environment import detect
    from kernlock.testing import HubServer

    variant = str(detect())
    _serve(work / "hub", variant, args)
    project = work / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "ready"\nversion = "0"\n\n[tool.kernlock]\nenvironments = ["{variant}"]\n\n'
        f'[tool.kernlock.kernels]\n"{REPO}" = "v2"\n'
    )
    rows: dict[str, list[dict[str, float]]] = {"kernlock": [], "plain kernels": []}
    with HubServer(work / "hub", port=port):
        api.lock(project)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        for _ in range(args.repeats):
            _fresh(work)
            start = time.perf_counter()
            synced = subprocess.run(
                [sys.executable, "-m", "kernlock", "sync"], cwd=project, env=env, capture_output=True, text=True
            )
            sync_s = time.perf_counter() - start
            if synced.returncode != 0:
                raise SystemExit(f"kernlock sync failed:\n{synced.stderr}")
            figures = _train(work, "kernlock", {**env, "HF_HUB_OFFLINE": "1"})
            done_s = sync_s + figures["to_loaded_s"] + figures["first_step_s"]
            rows["kernlock"].append(
                {**figures, "sync_s": sync_s, "ready_s": sync_s + figures["to_loaded_s"], "done_s": done_s}
            )
            _fresh(work)
            figures = _train(work, "plain", env)
            done_s = figures["to_loaded_s"] + figures["first_step_s"]
            rows["plain kernels"].append(
                {**figures, "sync_s": 0.0, "ready_s": figures["to_loaded_s"], "done_s": done_s}
            )
    medians = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "device"}
        for name, runs in rows.items()
    }
    device = rows["kernlock"][0]["device"]
    build = "the Triton build" if args.triton else "the sample attention build"
    print(f"{REPO} v2, {build} + {args.so_mib} MiB, on {device}; median of {args.repeats}, empty caches each")
    print(
        f"{'row':16}{'sync s':>9}{'get_kernel s':>14}{'ready s':>10}{'1st step s':>12}{'2nd step s':>12}{'done s':>9}"
    )
    for name, m in medians.items():
        print(
            f"{name:16}{m['sync_s']:>9.2f}{m['get_kernel_s']:>14.2f}{m['ready_s']:>10.2f}{m['first_step_s']:>12.2f}"
            f"{m['second_step_s']:>12.3f}{m['done_s']:>9.2f}"
        )
    ratio = medians["kernlock"]["ready_s"] / medians["plain kernels"]["ready_s"]
    first_call = medians["kernlock"]["first_step_s"] - medians["kernlock"]["second_step_s"]
    print(
        f"ready, kernlock / plain kernels: {ratio:.2f}x; first-call cost of the build (first step - second): "
        f"{first_call:.2f} s"
    )
    if args.json:
        args.json.write_text(json.dumps({"medians": medians, "ratio": ratio, "first_call_s": first_call}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
