"""What `kernlock hook install`, and `kernlock run`'s binding of an environment while a run lasts, cost a process
that never imports kernels: `python -c pass`, with and without.

    python benchmarks/hook.py            # 101 runs of each, interleaved; medians of wall and CPU time, differences
    python benchmarks/hook.py --runs 21

A fresh virtual environment (this one's packages reached through a ``.pth`` line, as tests/installs.overlay_venv
makes it) runs ``python -c pass`` in turn without either, with the hook (unbound), and with one run's binding (this
process standing for the run in progress), so that drift of the machine hits all alike. Bytecode of both modules is
compiled once before timing; only the ``.pth`` files come and go.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import in_scratch_folder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from installs import overlay_venv

from kernlock.commands import runbind


def _time(python: Path) -> tuple[float, float]:
    """Wall time and CPU time (user + system, from wait4: less sensitive to a busy machine) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen([str(python), "-c", "pass"])
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    return wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=101)
    args = parser.parse_args()

    def run(work: Path) -> int:
        python = overlay_venv(work / "venv")
        pth = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        site = Path(pth)
        subprocess.run([str(python), "-m", "kernlock", "hook", "install"], check=True, capture_output=True)
        hook = site / "kernlock-hook.pth"  # only the .pth files come and go: the modules and their bytecode stay
        hook_line = hook.read_bytes()
        subprocess.run([str(python), "-c", "import _kernlock_hook"], check=True)  # its bytecode, once
        hook.unlink()
        lock = str(work / "kernels.lock")  # never read: the process imports no kernel
        binding = runbind.bind({"KERNLOCK_LOCKFILE": lock, "KERNLOCK_MODE": "strict"}, ("python",), site=site)
        assert binding is not None
        run_line = binding.pth.read_bytes()
        binding.pth.unlink()
        cases: dict[str, list[tuple[float, float]]] = {"without": [], "the hook": [], "a run's binding": []}
        files = {"the hook": (hook, hook_line), "a run's binding": (binding.pth, run_line)}
        for _ in range(3):  # warm the page cache
            _time(python)
        for _ in range(args.runs):
            for case, times in cases.items():
                if case in files:
                    files[case][0].write_bytes(files[case][1])
                times.append(_time(python))
                if case in files:
                    files[case][0].unlink()
        for i, what in ((0, "wall"), (1, "CPU")):
            a = statistics.median(t[i] for t in cases["without"])
            for case in files:
                b = statistics.median(t[i] for t in cases[case])
                print(
                    f"python -c pass, {what} time, median of {args.runs}: without {a * 1e3:.2f} ms, "
                    f"with {case} {b * 1e3:.2f} ms, difference {(b - a) * 1e3:+.2f} ms"
                )
        return 0

    return in_scratch_folder("kernlock-hook-", run)


if __name__ == "__main__":
    sys.exit(main())
