"""GPU end to end: a real CUDA kernel through kernels.lock, on a CUDA machine.

1. Detects this machine's environment (`kernlock env`).
2. Compiles gpu/flash_attn_cuda.cu twice for this torch/CUDA: the v2 build, and a v3 build whose backward is wrong
   for grouped-query attention (the kernels-community#1085 scenario).
3. Builds `kernels-community/flash-attn2` with real git history: CPU builds on v2 and v3 plus the two CUDA builds
   (LFS .so), and serves it from the local Hub.
4. Locks a project whose environments are this GPU machine and a CPU machine with plain `v3`: a GQA Llama's
   gradients through it differ from SDPA's. Then pins `{ rev = "v2", when = "cuda == X.Y" }, { rev = "v3" }`:
   the GPU gets v2, the CPU keeps v3, and training is right.
5. Trains a tiny Llama with GQA for a few steps, forward and backward, through the locked CUDA build via
   `import kernlock.activate`, checking logits and gradients against SDPA.
6. Times kernel loads: activated + synced vs the kernels library's online path (20 ms latency) vs get_local_kernel.

Run on the GPU machine from the repository root: `python benchmarks/gpu_e2e.py` (kernlock importable, e.g.
`PYTHONPATH=.`). Prints everything a reviewer needs; exits 1 if any check fails. Not part of the CPU test suite;
tests/system/test_gpu_e2e_cpu.py runs its CPU parts.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPO = "kernels-community/flash-attn2"
CPU_ENV = "torch213-cxx11-cpu-x86_64-linux"

TRAIN = """\
import kernlock.activate  # every Hub kernel load in this process comes from kernels.lock

import copy
import json
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
config = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128)
reference = LlamaForCausalLM(copy.deepcopy(config)).to(device)  # each model its own config: the attention
reference.set_attn_implementation("sdpa")                          # choice lives there
model = LlamaForCausalLM(copy.deepcopy(config)).to(device)
model.load_state_dict(reference.state_dict())
model.set_attn_implementation("kernels-community/flash-attn2")
assert reference.config._attn_implementation == "sdpa"
batch = torch.randint(0, 256, (4, 64), device=device)

ours, theirs = model(input_ids=batch, labels=batch), reference(input_ids=batch, labels=batch)
ours.loss.backward()
theirs.loss.backward()
logits_diff = (ours.logits - theirs.logits).abs().max().item()
grad_diff = max((a.grad - b.grad).abs().max().item() for a, b in zip(model.parameters(), reference.parameters()))
model.zero_grad()

optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
losses = []
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 8):
    loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(round(loss.item(), 4))
kernel = next(m for m in list(sys.modules.values()) if isinstance(getattr(m, "KERNEL_IDENTITY", None), dict))
print(json.dumps({"device": device, "identity": kernel.KERNEL_IDENTITY, "calls": kernel.CALL_COUNTS,
                  "losses": losses, "max_abs_logits_diff": logits_diff, "max_abs_grad_diff": grad_diff}))
"""

LOAD = """\
import sys, time
from pathlib import Path
import torch  # imported before timing in every mode: the load itself is what is measured
import kernels
mode, repo, arg = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "activated":
    import kernlock.activate
start = time.perf_counter()
if mode == "local":
    kernels.get_local_kernel(Path(arg))
else:
    kernels.get_kernel(repo, version=int(arg))
print((time.perf_counter() - start) * 1000)
"""


def write_project(project: Path, gpu_env: str, cpu_env: str, cuda: str | None) -> None:
    """pyproject.toml for both machines; with ``cuda``, pin v2 on that CUDA version and v3 elsewhere."""
    if cuda:
        pin = f'{{ rev = "v2", when = "cuda == {cuda}" }},  # kernels-community#1085'
        kernels = f'"{REPO}" = [\n  {pin}\n  {{ rev = "v3" }},\n]\n'
    else:
        kernels = f'"{REPO}" = "v3"\n'
    project.mkdir(parents=True, exist_ok=True)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "gpu-train"\nversion = "0.1.0"\n\n'
        f'[tool.kernlock]\nenvironments = ["{gpu_env}", "{cpu_env}"]\n\n[tool.kernlock.kernels]\n{kernels}'
    )


def make_repo(hub_root: Path, cuda_builds: dict[int, Path]) -> None:
    """flash-attn2 with CPU builds on v2/v3 and the given prebuilt CUDA variant folders uploaded onto them."""
    from kernlock.testing import create_kernel_repo

    # Unsigned builds: the GPU image has no sigstore (signatures are tested on CPU,
    # tests/functional/test_signatures.py); the
    # lock records them as "unsigned", as it does for any build without a bundle.
    repo = create_kernel_repo(
        hub_root,
        REPO,
        {"v2": [CPU_ENV, "torch-cpu"], "v3": [CPU_ENV, "torch-cpu"]},
        kind="attention",
        trusted=True,
        signed=False,
    )
    for version, folder in sorted(cuda_builds.items()):
        files = {
            str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()
        }
        repo.upload_files(f"v{version}", files, message=f"Uploaded using `kernel-builder` (cuda build, v{version})")


class Session:
    """Runs kernlock and Python as a user would, in the project, against the local Hub."""

    def __init__(self, work: Path, server_env: dict[str, str]) -> None:
        self.project = work / "project"
        self.project.mkdir(parents=True, exist_ok=True)
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNEL", "KERNLOCK"))}
        self.env.update(server_env)
        self.env.update(
            {
                "PYTHONPATH": path,
                "HF_HOME": str(work / "hf-home"),
                "HF_HUB_CACHE": str(work / "hf-cache"),
                "KERNLOCK_CACHE": str(work / "kernlock-cache"),
                "TRANSFORMERS_VERBOSITY": "error",
            }
        )

    def run(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, *args], cwd=self.project, env=env or self.env, capture_output=True, text=True
        )
        if check and proc.returncode != 0:
            raise SystemExit(f"FAILED: {' '.join(args)}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def kernlock(self, *args: str, check: bool = True) -> str:
        proc = self.run("-m", "kernlock", *args, check=check)
        return proc.stdout + proc.stderr

    def train(self, steps: int = 8, check: bool = True) -> subprocess.CompletedProcess:
        (self.project / "train_gpu.py").write_text(TRAIN)
        return self.run("train_gpu.py", str(steps), check=check, env=dict(self.env, HF_HUB_OFFLINE="1"))


def _median_load(session: Session, mode: str, arg: str, runs: int, env: dict[str, str]) -> float:
    script = session.project / "load_time.py"
    script.write_text(LOAD)
    times = [float(session.run(str(script), mode, REPO, arg, env=env).stdout.split()[-1]) for _ in range(runs)]
    return statistics.median(times)


def main() -> None:
    from kernlock.environments.environment import detect
    from kernlock.lock import file as lockfile
    from kernlock.testing import HubServer

    sys.path.insert(0, str(ROOT / "gpu"))
    from build_cuda_kernel import build_variant

    failures: list[str] = []
    env = detect()
    cuda = env.facts()["cuda"]
    print(f"environment: {env}")
    if cuda is None:
        raise SystemExit(
            "no CUDA here: run this on a CUDA machine (tests/system/test_gpu_e2e_cpu.py covers the CPU parts)"
        )
    with tempfile.TemporaryDirectory(prefix="kernlock-gpu-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        builds = {2: work / "cuda-v2", 3: work / "cuda-v3"}
        build_variant(builds[2], version=2)
        build_variant(builds[3], version=3, gqa_backward_bug=True)
        print(f"compiled the v2 and v3 CUDA builds of {REPO} for {env} in {time.perf_counter() - start:.1f} s")
        make_repo(work / "hub", builds)
        with HubServer(work / "hub") as server:
            session = Session(work, server.env())
            print("\n$ kernlock env\n" + session.kernlock("env"))

            print(f"== 1. {REPO} = v3 on every environment (no pin)")
            write_project(session.project, str(env), CPU_ENV, cuda=None)
            print(session.kernlock("lock"))
            session.kernlock("sync")
            broken = json.loads(session.train(steps=2).stdout.strip().splitlines()[-1])
            print(
                f"training through {broken['identity']['branch']} {broken['identity']['variant']}: max abs logits "
                f"diff vs SDPA {broken['max_abs_logits_diff']:.2e}, max abs GRADIENT diff "
                f"{broken['max_abs_grad_diff']:.2e} -> the v3 backward is wrong for GQA\n"
            )
            if broken["max_abs_grad_diff"] < 1e-2:
                failures.append("the v3 CUDA build was expected to give wrong GQA gradients")

            print(f'== 2. pin {{ rev = "v2", when = "cuda == {cuda}" }}, {{ rev = "v3" }}')
            write_project(session.project, str(env), CPU_ENV, cuda=f"{cuda.major}.{cuda.minor}")
            print(session.kernlock("lock"))
            print(session.kernlock("sync"))
            print(session.kernlock("show"))
            lock = (session.project / "kernels.lock").read_text()
            gpu_commit = lockfile.loads(lock).entry_for(REPO, str(env)).commit
            server.log.clear()
            result = json.loads(session.train(steps=8).stdout.strip().splitlines()[-1])
            print(f"requests to the Hub during training: {len(server.log)}")
            print(json.dumps(result, indent=2))
            identity = result["identity"]
            if (identity["version"], identity["variant"]) != (2, str(env)):
                failures.append(f"trained with {identity}, expected the locked v2 CUDA build {env}")
            if result["max_abs_logits_diff"] > 1e-3 or result["max_abs_grad_diff"] > 1e-3:
                failures.append("numerics differ from SDPA by more than 1e-3")
            if not result["losses"][-1] < result["losses"][0]:
                failures.append("the loss did not go down")
            if len(server.log):
                failures.append("training made Hub requests")
            if 'requested = "v2"' not in lock or 'requested = "v3"' not in lock:
                failures.append("the lock does not hold both pins")

            print("\n== 3. kernel load time, 'load this kernel' -> 'module ready' (median of 5 processes)")
            activated = _median_load(session, "activated", "2", 5, dict(session.env, HF_HUB_OFFLINE="1"))
            server.faults.latency(0.020)
            online_env = dict(session.env, HF_HUB_CACHE=str(work / "kernels-online-cache"))
            server.log.clear()
            online_cold = _median_load(session, "online", "2", 1, online_env)
            cold_requests = len(server.log)
            server.log.clear()
            online_warm = _median_load(session, "online", "2", 5, online_env)
            warm_requests = len(server.log) / 5
            server.faults.clear()
            variant_dir = next((work / "hf-cache").glob(f"kernels--*/snapshots/{gpu_commit}/build/{env}"))
            floor = _median_load(session, "local", str(variant_dir), 5, session.env)
            print(f"{'path':<52}{'ms':>9}{'requests':>10}{'vs floor':>10}")
            for name, ms, requests in (
                ("kernlock activated + synced", activated, 0),
                ("kernels get_kernel(version=2), online, cold, 20 ms", online_cold, cold_requests),
                ("kernels get_kernel(version=2), online, warm, 20 ms", online_warm, warm_requests),
                ("kernels get_local_kernel(path) (floor)", floor, 0),
            ):
                print(f"{name:<52}{ms:>9.1f}{requests:>10.0f}{ms / floor:>9.2f}x")
    print("\nRESULT: " + ("all checks passed" if not failures else "FAILED: " + "; ".join(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
