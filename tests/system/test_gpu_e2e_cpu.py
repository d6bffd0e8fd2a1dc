"""The CPU parts of benchmarks/gpu_e2e.py: a repo with prebuilt CUDA variants, a `when` pin per CUDA version,
and GQA training through the locked CPU build (the GPU run itself needs a CUDA machine)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from kernlock.lock import file as lockfile
from kernlock.testing import HubServer

pytestmark = pytest.mark.subprocess

GPU_ENV = "torch211-cxx11-cu130-x86_64-linux"
CPU_ENV = "torch213-cxx11-cpu-x86_64-linux"


def _load_script():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_e2e.py"
    spec = importlib.util.spec_from_file_location("gpu_e2e", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_e2e"] = module
    spec.loader.exec_module(module)
    return module


def _fake_cuda_build(folder: Path, version: int) -> Path:
    """A variant folder shaped like gpu/build_cuda_kernel.py's output (the .so is not a real library here)."""
    variant = folder / "build" / GPU_ENV
    variant.mkdir(parents=True)
    (variant / "__init__.py").write_text(f"raise ImportError('CUDA build v{version} cannot load on a CPU')\n")
    (variant / f"_flash_attn2_cuda_v{version}.abi3.so").write_bytes(b"\x7fELF" + bytes([version]) * 4096)
    metadata = {"id": f"_flash_attn2_cuda_v{version}", "name": "flash-attn2", "version": version,
                "license": "BSD-3-Clause", "python-depends": [], "backend": {"type": "cuda"}}  # fmt: skip
    (variant / "metadata.json").write_text(json.dumps(metadata))
    return folder


@pytest.fixture
def session(tmp_path: Path):
    script = _load_script()
    builds = {v: _fake_cuda_build(tmp_path / f"cuda-v{v}", v) for v in (2, 3)}
    script.make_repo(tmp_path / "hub", builds)
    with HubServer(tmp_path / "hub") as server:
        yield script, script.Session(tmp_path, server.env()), server


@pytest.mark.slow
def test_when_pin_gives_the_gpu_v2_and_the_cpu_v3_and_gqa_training_works(session) -> None:
    script, user, server = session
    script.write_project(user.project, GPU_ENV, CPU_ENV, cuda="13.0")
    user.kernlock("lock")
    lock = lockfile.read(user.project / "kernels.lock")
    gpu, cpu = lock.entry_for(script.REPO, GPU_ENV), lock.entry_for(script.REPO, CPU_ENV)
    assert (gpu.requested, gpu.variant_for(GPU_ENV).name) == ("v2", GPU_ENV)
    assert (cpu.requested, cpu.variant_for(CPU_ENV).name) == ("v3", CPU_ENV)
    so = next(f for f in gpu.variant_for(GPU_ENV).files if f.path.endswith(".so"))
    assert so.hash.startswith("sha256:") and so.size == 4100  # the CUDA build is an LFS file of the lock

    user.kernlock("sync")
    server.log.clear()
    result = json.loads(user.train(steps=3).stdout.strip().splitlines()[-1])
    assert len(server.log) == 0
    assert result["device"] == "cpu"
    assert (result["identity"]["version"], result["identity"]["variant"]) == (3, CPU_ENV)
    assert result["max_abs_logits_diff"] < 1e-4 and result["max_abs_grad_diff"] < 1e-4
    assert result["losses"][-1] < result["losses"][0]


def test_without_the_pin_every_environment_gets_v3(session) -> None:
    script, user, _ = session
    script.write_project(user.project, GPU_ENV, CPU_ENV, cuda=None)
    user.kernlock("lock")
    lock = lockfile.read(user.project / "kernels.lock")
    assert {k.requested for k in lock.kernels} == {"v3"}
    assert lock.entry_for(script.REPO, GPU_ENV).variant_for(GPU_ENV).name == GPU_ENV
