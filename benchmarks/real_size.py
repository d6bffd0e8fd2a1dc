"""`kernlock sync` at real build sizes, against the floor of fetching the same bytes with curl and hashing them.

    python benchmarks/real_size.py [--so-mib 1024] [--fleet-mib 256] [--fleet-variants 8] [--repeats 3] [--json F]

Real flash-attn2 builds carry a `.so` of hundreds of MiB per variant. This builds, with kernlock's local Hub
(`kernlock.testing`, which writes a build of any size in 8 MiB chunks), two signed kernels:

- one variant whose `.so` is ``--so-mib`` MiB: row "cold sync, one variant";
- ``--fleet-variants`` variants of ``--fleet-mib`` MiB each: row "sync --all-environments".

For each row, the floor is what a shell script would do with the same server and the same bytes: `curl -o` every
file of the variant(s) to a file, then `sha256sum` them (the sequential floor: fetch, then one more pass to hash);
kernlock's row is the whole `kernlock sync --frozen --all-environments` process (the builds are not this
machine's) (interpreter start, imports, lock read, download,
hash, signature check, publish) into an empty cache. Medians of ``--repeats`` runs, each into an empty cache; the
page cache is warm for both (the server's files were just written). Prints each ratio kernlock / floor; the goal
(issue 32) is <= 1.0x: hashing while downloading, no second pass, no extra copy.
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

ONE = "torch212-cxx11-cpu-x86_64-linux"
FLEET = [
    "torch213-cxx11-cu126-x86_64-linux",
    "torch213-cxx11-cu128-x86_64-linux",
    "torch213-cxx11-cu130-x86_64-linux",
    "torch212-cxx11-cu126-x86_64-linux",
    "torch212-cxx11-cu128-x86_64-linux",
    "torch212-cxx11-cu130-x86_64-linux",
    "torch213-cxx11-rocm71-x86_64-linux",
    "torch212-cxx11-rocm71-x86_64-linux",
    "torch213-cxx11-xpu20260-x86_64-linux",
    "torch212-cxx11-xpu20253-x86_64-linux",
]


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--so-mib", type=int, default=1024, help="the one variant's .so in MiB (default 1024)")
    parser.add_argument("--fleet-mib", type=int, default=256, help="each fleet variant's .so in MiB (default 256)")
    parser.add_argument(
        "--fleet-variants", type=int, default=8, help=f"fleet variants (default 8, at most {len(FLEET)})"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per row, median printed (default 3)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    return parser.parse_args()


def main() -> int:
    args = _args()
    return in_scratch_folder("kernlock-bench-real-", lambda work: _run(args, work))


def _timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr.decode(errors='replace')[-3000:]}")
    return elapsed


def _floor(urls: list[str], folder: Path) -> float:
    """curl every URL to a file, then sha256sum the files: the sequential floor of fetching and hashing."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    files = [str(folder / f"{i:03d}") for i in range(len(urls))]
    start = time.perf_counter()
    for url, file in zip(urls, files, strict=True):
        subprocess.run(["curl", "-sSf", "-o", file, url], check=True)
    subprocess.run(["sha256sum", *files], check=True, capture_output=True)
    return time.perf_counter() - start


def _run(args: argparse.Namespace, work: Path) -> int:
    port = free_port()
    use_local_hub(work, port)
    compile_bytecode()
    from huggingface_hub import hf_hub_url

    from kernlock import api
    from kernlock.hub.client import REPO_TYPE, Hub
    from kernlock.sync import engine as syncing
    from kernlock.testing import HubServer, create_kernel_repo, set_org_trust

    fleet = FLEET[: args.fleet_variants]
    hub_root = work / "hub"
    set_org_trust(hub_root, "bench-real", True)
    cases = {
        "cold sync, one variant": ("bench-real/one", [ONE], args.so_mib),
        "sync --all-environments": ("bench-real/fleet", fleet, args.fleet_mib),
    }
    built = time.perf_counter()
    for repo, variants, mib in cases.values():
        create_kernel_repo(hub_root, repo, {"v1": variants}, so_size=mib * 2**20)
    print(f"built the kernels in {time.perf_counter() - built:.1f} s", flush=True)
    figures: dict[str, dict[str, object]] = {}
    with HubServer(hub_root, port=port):
        for name, (repo, variants, _mib) in cases.items():
            project = work / f"project-{repo.split('/')[1]}"
            project.mkdir()
            envs = ", ".join(f'"{v}"' for v in variants)
            (project / "pyproject.toml").write_text(
                f'[project]\nname = "b"\nversion = "0"\n\n[tool.kernlock]\nenvironments = [{envs}]\n\n'
                f'[tool.kernlock.kernels]\n"{repo}" = "v1"\n'
            )
            lock = api.lock(project, hub=Hub()).lock
            pairs = syncing.targets(lock, None)
            urls = [
                hf_hub_url(
                    e.repo,
                    f"build/{v.name}/{f.path}",
                    repo_type=REPO_TYPE,
                    revision=e.commit,
                    endpoint=os.environ["HF_ENDPOINT"],
                )
                for e, v in pairs
                for f in v.files
            ]
            total = sum(f.size for _e, v in pairs for f in v.files)
            cache = work / "cache"
            argv = [
                sys.executable,
                "-m",
                "kernlock",
                "sync",
                "--frozen",
                "--all-environments",
                "--project",
                str(project),
            ]
            env = {**os.environ, "HF_HUB_CACHE": str(cache), "KERNLOCK_CACHE": str(work / "kernlock-cache")}
            floors, ours = [], []
            for _ in range(args.repeats):
                floors.append(_floor(urls, work / "floor"))
                shutil.rmtree(work / "floor", ignore_errors=True)
                shutil.rmtree(cache, ignore_errors=True)
                ours.append(_timed(argv, env))
                shutil.rmtree(cache, ignore_errors=True)
            floor, mine = statistics.median(floors), statistics.median(ours)
            figures[name] = {
                "variants": len(pairs),
                "mib": total / 2**20,
                "floor_s": floor,
                "kernlock_s": mine,
                "ratio": mine / floor,
            }
    print(f"\n{'':28}{'variants':>9}{'MiB':>8}{'curl+sha256sum s':>18}{'kernlock s':>12}{'ratio':>8}")
    for name, row in figures.items():
        print(
            f"{name:28}{row['variants']:>9}{row['mib']:>8.0f}{row['floor_s']:>18.2f}{row['kernlock_s']:>12.2f}"
            f"{row['ratio']:>7.2f}x"
        )
    print(f"\n{os.cpu_count()} cores; medians of {args.repeats} runs; goal <= 1.00x the curl+sha256sum floor")
    if args.json:
        args.json.write_text(json.dumps({"cores": os.cpu_count(), "rows": figures}, indent=1))
    return 0 if all(row["ratio"] <= 1.0 for row in figures.values()) else 1  # type: ignore[operator]


if __name__ == "__main__":
    sys.exit(main())
