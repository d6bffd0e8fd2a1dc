"""Two "nodes" behind one `kernlock serve` mirror (gunicorn) with the upstream Hub stopped, 64 clients at once
(issue 24): every node ends with the locked build, verified, and loads it.

Each node has its own kernel cache, HOME, kernlock cache and process tree; its 32 clients run `kernlock sync` at
once against the same lock, with HF_ENDPOINT pointing at the mirror, which serves exactly the locked commits from
a bundle (`kernlock bundle`, written while the upstream Hub was still running). Throughput figures of the mirror
at 64 clients are in docs/benchmarks.md (benchmarks/mirror.py --static); this test asserts behaviour only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli import run_cli
from projects import CPU_ENV, TINY_ACTIVATION, LockedProject, tiny_locked_project

from kernlock.lock import file as lockfile
from kernlock.sync import engine as syncing
from kernlock.testing import HubServer
from kernlock.testing.mirror_process import MirrorProcess, client_env

pytestmark = pytest.mark.subprocess

CLIENTS_PER_NODE = 32


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LockedProject, MirrorProcess]]:
    base = tmp_path_factory.mktemp("fleet")
    tiny = tiny_locked_project(base)
    bundle = base / "site.tar"
    with HubServer(tiny.root) as upstream:
        made = run_cli("bundle", "-o", str(bundle), "--project", str(tiny.project), env={**tiny.env, **upstream.env()})
        assert made.returncode == 0, made.stderr
    # The upstream Hub is stopped from here on: nothing below can reach it.
    with MirrorProcess(["--from", str(bundle)], tiny.env, base / "access.log", workers=2, threads=8) as mirror:
        yield tiny, mirror


@pytest.mark.binds
@pytest.mark.slow
def test_64_clients_on_2_nodes_end_with_the_locked_build_from_the_mirror(site, tmp_path: Path):
    tiny, mirror = site
    lock = lockfile.read(tiny.project / "kernels.lock")
    nodes = []
    for name in ("node-a", "node-b"):
        home = tmp_path / name / "home"
        home.mkdir(parents=True)
        env = client_env(tiny.env, mirror.url, tmp_path / name / "hf-cache")
        env.update(HOME=str(home), KERNLOCK_CACHE=str(home / ".cache" / "kernlock"))
        nodes.append((name, env))
    argv = [sys.executable, "-m", "kernlock", "sync", "--project", str(tiny.project)]
    procs = [
        (name, subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for name, env in nodes
        for _ in range(CLIENTS_PER_NODE)
    ]
    outputs = [(name, *p.communicate(timeout=600), p.returncode) for name, p in procs]
    failed = [(name, err[-800:]) for name, _out, err, code in outputs if code != 0]
    assert len(outputs) == 64 and failed == []
    for name, env in nodes:
        cache = Path(env["HF_HUB_CACHE"])
        assert syncing.verify(lock, [CPU_ENV], cache=cache).problems == (), name
        leftovers = [p for p in cache.rglob("*") if p.name.endswith((".incomplete", ".tmp"))]
        assert leftovers == [], name
    downloads = [line for line in mirror.requests() if "/resolve/" in line]
    files = sum(len(v.files) for _e, v in syncing.targets(lock, [CPU_ENV]))
    assert len(downloads) >= 2 * files, "each node fetched the locked files from the mirror"

    # One load per node, offline now: the locked build, from that node's own cache.
    get = f"kernels.get_kernel('{TINY_ACTIVATION}', version=1)"
    code = f"import json, kernels; print(json.dumps({get}.KERNEL_IDENTITY))"
    for name, env in nodes:
        loaded = tiny.run_argv(
            [sys.executable, "-m", "kernlock", "run", "--", sys.executable, "-c", code],
            env={**env, "HF_HUB_OFFLINE": "1"},
        )
        assert loaded.returncode == 0, (name, loaded.stderr[-2000:])
        assert json.loads(loaded.stdout.strip().splitlines()[-1]) == tiny.identity(TINY_ACTIVATION), name
