"""What `kernlock hook install` costs a process that never imports kernels: `python -c pass`, with and without.

    python benchmarks/hook.py            # 101 runs of each, interleaved; medians of wall and CPU time, differences
    python benchmarks/hook.py --runs 21

A fresh virtual environment (this one's packages reached through a ``.pth`` line, as tests/helpers.overlay_venv
makes it) runs ``python -c pass`` alternately without the hook and with it (bound to a lock, strict), so that
drift of the machine hits both alike. Bytecode of the hook module is compiled once before timing.
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
from helpers import overlay_venv


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
        pth = site / "kernlock-hook.pth"  # only the .pth comes and goes: the module and its bytecode stay
        line = pth.read_bytes()
        subprocess.run([str(python), "-c", "import _kernlock_hook"], check=True)  # its bytecode, once
        without, with_hook = [], []
        for _ in range(3):  # warm the page cache
            _time(python)
        for _ in range(args.runs):
            pth.unlink()
            without.append(_time(python))
            pth.write_bytes(line)
            with_hook.append(_time(python))
        for i, what in ((0, "wall"), (1, "CPU")):
            a = statistics.median(t[i] for t in without)
            b = statistics.median(t[i] for t in with_hook)
            print(
                f"python -c pass, {what} time, median of {args.runs}: without the hook {a * 1e3:.2f} ms, "
                f"with it {b * 1e3:.2f} ms, difference {(b - a) * 1e3:+.2f} ms"
            )
        return 0

    return in_scratch_folder("kernlock-hook-", run)


if __name__ == "__main__":
    sys.exit(main())
