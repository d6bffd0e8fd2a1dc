"""`kernlock check` on a CUDA machine: the kernels-community#1085 scenario of benchmarks/gpu_e2e.py (issue 26).

1. Compiles gpu/flash_attn_cuda.cu twice for this torch/CUDA (gpu/build_cuda_kernel.py): the v2 build, and a v3
   build whose backward is wrong for grouped-query attention only.
2. Builds `kernels-community/flash-attn2` with both CUDA builds (and CPU builds) and serves it from the local Hub.
3. Locks plain `v3` for this GPU machine and a CPU machine, syncs, and runs `kernlock check --record`: the v3 CUDA
   build must fail its GQA gradients (and only those), with no Hub request.
4. Pins `{ rev = "v2", when = "cuda == X.Y" }, { rev = "v3" }`, re-locks, syncs, and runs `kernlock check
   --record` again: every case must pass. Prints both tables and kernels.check.toml.

Run from the repository root on the GPU machine (kernlock and the recipe's wheels on PYTHONPATH, see
gpu/README.md): `python gpu/check_demo.py`. Exits 1 if an expectation fails.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gpu"), str(ROOT / "benchmarks")]


def _failed_cases(output: str) -> list[str]:
    """The case column of every FAIL row of a `kernlock check` table."""
    failed = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        if cells and cells[0].startswith("kernels-community/") and cells[-1] == "FAIL":
            failed.append(cells[3])
    return failed


def main() -> None:
    from build_cuda_kernel import build_variant
    from gpu_e2e import CPU_ENV, Session, make_repo, write_project

    from kernlock.environments.environment import detect
    from kernlock.testing import HubServer

    failures: list[str] = []
    env = detect()
    cuda = env.facts()["cuda"]
    print(f"environment: {env}")
    if cuda is None:
        raise SystemExit("no CUDA here: run this on a CUDA machine (tests/test_check.py covers the CPU proof)")
    with tempfile.TemporaryDirectory(prefix="kernlock-check-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        builds = {2: work / "cuda-v2", 3: work / "cuda-v3"}
        build_variant(builds[2], version=2)
        build_variant(builds[3], version=3, gqa_backward_bug=True)
        print(f"compiled the v2 and v3 CUDA builds for {env} in {time.perf_counter() - start:.1f} s")
        make_repo(work / "hub", builds)
        with HubServer(work / "hub") as server:
            session = Session(work, server.env())
            for step, pin in ((1, None), (2, f"{cuda.major}.{cuda.minor}")):
                title = "plain v3 (no pin)" if pin is None else f'{{ rev = "v2", when = "cuda == {pin}" }}, v3'
                print(f"\n== {step}. kernels-community/flash-attn2 = {title}")
                write_project(session.project, str(env), CPU_ENV, cuda=pin)
                print(session.kernlock("lock"))
                session.kernlock("sync")
                server.log.clear()
                proc = session.run("-m", "kernlock", "check", "--record", check=False)
                print(f"$ kernlock check --record   (exit {proc.returncode})\n{proc.stdout}{proc.stderr[-3000:]}")
                print(f"requests to the Hub during the check: {len(server.log)}")
                if len(server.log):
                    failures.append(f"step {step}: the check made Hub requests")
                failed = _failed_cases(proc.stdout)
                if pin is None:
                    gqa_only = failed and all(case.startswith("attention GQA") for case in failed)
                    if proc.returncode != 1 or not gqa_only or not any("gradients" in c for c in failed):
                        failures.append(f"step 1: expected v3 to fail GQA gradients only, got {failed}")
                elif proc.returncode != 0 or failed:
                    failures.append(f"step 2: expected v2 to pass every case, got {failed}")
            print("\n$ cat kernels.check.toml\n" + (session.project / "kernels.check.toml").read_text())
    if failures:
        print("\nFAILED:\n- " + "\n- ".join(failures))
        sys.exit(1)
    print("\nall checks passed")


if __name__ == "__main__":
    main()
