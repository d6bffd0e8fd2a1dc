"""`kernlock check` on a CUDA machine: the kernels-community#1085 scenario of benchmarks/gpu_e2e.py (issues 26, 33).

1. Compiles gpu/flash_attn_cuda.cu twice for this torch/CUDA (gpu/build_cuda_kernel.py): the v2 build, and a v3
   build whose backward is wrong for grouped-query attention only.
2. Builds `kernels-community/flash-attn2` with both CUDA builds (and CPU builds, unsigned) and serves it from the
   local Hub.
3. Locks plain `v3` for this GPU machine and a CPU machine, syncs, and runs `kernlock check --record`: the v3 CUDA
   build must fail its GQA gradients (and only those), with no Hub request.
4. Pins `{ rev = "v2", when = "cuda == X.Y" }, { rev = "v3" }`, re-locks, syncs, and runs `kernlock check --speed
   --record`: every case must pass, with no Hub request; prints the speed and training-step tables.
5. Runs `kernlock check --upgrade --kernel kernels-community/flash-attn2 --to v3 --speed --record`: it must exit 1
   naming the GQA gradient cases of the v3 build, and leave kernels.lock and pyproject.toml as they were.

Every table goes to stdout and, as markdown, to OUT/check-demo.md (`--out`, else $OUT, else ./check-demo-out).
`--cpu` runs the same steps on this machine's CPU with the fixture's pure-torch builds (v3's backward broken the
same way) instead of compiled CUDA ones: a dry run of everything but the compiler and the GPU.

Run from the repository root on the GPU machine (kernlock and the recipe's wheels on PYTHONPATH, see
gpu/README.md): `python gpu/check_demo.py [--seqlen N ...] [--out DIR]`. Exits 1 if an expectation fails.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gpu"), str(ROOT / "benchmarks")]
REPO = "kernels-community/flash-attn2"


def _failed_cases(output: str) -> list[str]:
    """The case column of every FAIL row of a `kernlock check` table."""
    failed = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        if len(cells) >= 7 and cells[0].startswith("kernels-community/") and cells[-1] == "FAIL":
            failed.append(cells[3])
    return failed


def _project(project: Path, environments: list[str], kernels: str) -> None:
    project.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(f'"{env}"' for env in dict.fromkeys(environments))
    (project / "pyproject.toml").write_text(
        '[project]\nname = "gpu-train"\nversion = "0.1.0"\n\n'
        f"[tool.kernlock]\nenvironments = [{listed}]\n\n[tool.kernlock.kernels]\n{kernels}"
    )


def _cpu_repo(hub: Path, variant: str) -> None:
    """The dry run's flash-attn2: the fixture's pure-torch attention, v3 with the GQA-only backward bug."""
    from kernlock.testing import create_kernel_repo

    builds = [variant, "torch-cpu"]
    create_kernel_repo(
        hub, REPO, {"v2": builds, "v3": builds}, kind="attention", kinds={"v3": "attention-gqa-bug"}, signed=False
    )


class Report:
    """Prints each step and keeps it as markdown."""

    def __init__(self, title: str) -> None:
        self.parts = [f"# {title}\n"]

    def text(self, text: str) -> None:
        print(text)
        self.parts.append(text + "\n")

    def console(self, title: str, command: str, code: int, output: str) -> None:
        print(f"\n== {title}\n$ {command}   (exit {code})\n{output}")
        self.parts.append(f"\n### {title}\n\n```console\n$ {command}\n{output.rstrip()}\n[exit {code}]\n```\n")

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "check-demo.md"
        path.write_text("".join(self.parts))
        return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="dry run on the CPU with the fixture's builds")
    parser.add_argument("--seqlen", type=int, action="append", help="--speed's sequence lengths (default 1024)")
    parser.add_argument("--out", type=Path, help="where check-demo.md goes (default: $OUT, else ./check-demo-out)")
    args = parser.parse_args()
    out = args.out or Path(os.environ.get("OUT") or "check-demo-out")
    seqlens = [str(n) for n in (args.seqlen or ([128] if args.cpu else [1024]))]

    from gpu_e2e import CPU_ENV, Session

    from kernlock.environments.environment import detect
    from kernlock.testing import HubServer

    failures: list[str] = []
    env = detect()
    cuda = env.facts()["cuda"]
    if cuda is None and not args.cpu:
        raise SystemExit("no CUDA here: run this on a CUDA machine, or `--cpu` for a dry run of the other steps")
    import torch

    device = torch.cuda.get_device_name() if cuda is not None and not args.cpu else "cpu"
    report = Report(f"kernlock check on {device} ({env})")
    report.text(f"torch {torch.__version__}; kernlock at {ROOT}; --seqlen {' '.join(seqlens)}")
    with tempfile.TemporaryDirectory(prefix="kernlock-check-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        if args.cpu:
            _cpu_repo(work / "hub", str(env))
            environments, pin = [str(env)], None
        else:
            from build_cuda_kernel import build_variant
            from gpu_e2e import make_repo

            builds = {2: work / "cuda-v2", 3: work / "cuda-v3"}
            build_variant(builds[2], version=2)
            build_variant(builds[3], version=3, gqa_backward_bug=True)
            report.text(f"compiled the v2 and v3 CUDA builds for {env} in {time.perf_counter() - start:.1f} s")
            make_repo(work / "hub", builds)
            environments, pin = [str(env), CPU_ENV], f"{cuda.major}.{cuda.minor}"
        with HubServer(work / "hub") as server:
            session = Session(work, server.env())

            def kernlock(title: str, *argv: str) -> tuple[int, str]:
                server.log.clear()
                proc = session.run("-m", "kernlock", *argv, check=False)
                output = proc.stdout + (proc.stderr[-3000:] if proc.returncode not in (0, 1) else "")
                report.console(title, "kernlock " + " ".join(argv), proc.returncode, output)
                return proc.returncode, proc.stdout

            # 1. plain v3: the broken build is caught before any training
            _project(session.project, environments, f'"{REPO}" = "v3"\n')
            session.kernlock("lock")
            session.kernlock("sync")
            code, stdout = kernlock("1. plain v3 (no pin): numerical parity", "check", "--record")
            if len(server.log):
                failures.append("step 1: the check made Hub requests")
            failed = _failed_cases(stdout)
            gqa_only = failed and all(case.startswith("attention GQA") for case in failed)
            if code != 1 or not gqa_only or not any("gradients" in c for c in failed):
                failures.append(f"step 1: expected v3 to fail GQA gradients only, got {failed}")

            # 2. v2 pinned where v3 is broken: every case passes; its speed and a training step
            if pin is None:
                kernels = f'"{REPO}" = "v2"\n'
            else:
                kernels = f'"{REPO}" = [\n  {{ rev = "v2", when = "cuda == {pin}" }},\n  {{ rev = "v3" }},\n]\n'
            _project(session.project, environments, kernels)
            session.kernlock("lock")
            session.kernlock("sync")
            speed_args = ["--speed", *(a for n in seqlens for a in ("--seqlen", n))]
            code, stdout = kernlock("2. v2 pinned: parity, --speed", "check", *speed_args, "--record")
            if len(server.log):
                failures.append("step 2: the check made Hub requests")
            if code != 0 or _failed_cases(stdout):
                failures.append(f"step 2: expected v2 to pass every case, got {_failed_cases(stdout)}")
            if "training step" not in stdout or "forward+backward" not in stdout:
                failures.append("step 2: no speed or training-step table")

            # 3. check before upgrading: v2 -> v3 names the broken cases; nothing in the project changes
            before = {n: _digest(session.project / n) for n in ("kernels.lock", "pyproject.toml")}
            upgrade = ["--upgrade", "--kernel", REPO, "--to", "v3", *speed_args, "--record"]
            code, stdout = kernlock("3. check --upgrade v2 -> v3", "check", *upgrade)
            verdicts = [line for line in stdout.splitlines() if line.startswith(f"{REPO} v2 ")]
            if code != 1 or not verdicts or "GQA" not in verdicts[0] or "gradients FAIL" not in verdicts[0]:
                failures.append(f"step 3: expected the upgrade to v3 to fail GQA gradients, got {verdicts}")
            if {n: _digest(session.project / n) for n in before} != before:
                failures.append("step 3: check --upgrade changed kernels.lock or pyproject.toml")
            recorded = (session.project / "kernels.check.toml").read_text()
            report.console("kernels.check.toml", "cat kernels.check.toml", 0, recorded)
    report.text("\nFAILED:\n- " + "\n- ".join(failures) if failures else "\nall checks passed")
    print(f"wrote {report.write(out)}")
    if failures:
        sys.exit(1)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


if __name__ == "__main__":
    main()
