"""Ray: every worker of a job, on every node of a cluster started outside kernlock, honours the driver's lock
(issue 44, docs/ray.md).

A real Ray cluster on 127.0.0.1 (tests/ray_cluster.py): `ray start --head` and nodes joining it, each raylet with
its own HOME and kernel cache, no dashboard UI, usage stats off, every process stopped after. The Hub runs with
the attention kernel's branch moved upstream since the lock, so an unlocked load would take the moved build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from envs import user_env_for
from processes import CHILD_HELPERS
from projects import TINY_ACTIVATION, TINY_ATTENTION, LockedProject, tiny_locked_project
from ray_cluster import QUIET, RayCluster

from kernlock.testing import HubServer, move_branch

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

BIN = Path(sys.executable).parent

# What each worker reports: its rank, node, process, the builds kernels loaded (identity and commit) and the lock
# kernlock activated it with; written as <out>/<name>-<pid>.json.
WORKER = CHILD_HELPERS + textwrap.dedent(
    """
    import json, os


    def report(out, name, **extra):
        import ray
        from kernlock.runtime import state

        settings = state.settings()
        found = {
            "node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(), "loaded": loaded(),
            "lockfile": settings and settings.lockfile, "mode": settings and settings.mode, **extra,
        }
        with open(os.path.join(out, f"{name}-{os.getpid()}.json"), "w") as handle:
            json.dump(found, handle)


    def train_step():
        import torch
        from transformers import AutoModelForCausalLM, LlamaConfig

        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        )
        model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTENTION)
        ids = torch.randint(0, 64, (2, 8))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return model, float(loss)
    """
)

TRAINER = textwrap.dedent(
    """
    import sys, tempfile
    import ray
    import ray.train
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    OUT, STORAGE, ADDRESS = sys.argv[1], sys.argv[2], sys.argv[3]


    def train_loop(config):
        import torch
        model, loss = train_step()
        rank = ray.train.get_context().get_world_rank()
        report(OUT, f"rank{rank}", rank=rank)
        with tempfile.TemporaryDirectory() as folder:
            checkpoint = None
            if rank == 0:
                torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
                checkpoint = ray.train.Checkpoint.from_directory(folder)
            ray.train.report({"loss": loss}, checkpoint=checkpoint)


    ray.init(address=ADDRESS)
    trainer = TorchTrainer(
        train_loop,
        scaling_config=ScalingConfig(
            num_workers=2, placement_strategy="STRICT_SPREAD", resources_per_worker={"CPU": 1, "main": 1}
        ),
        run_config=RunConfig(name="run", storage_path=STORAGE),
    )
    result = trainer.fit()
    print("CHECKPOINT", result.checkpoint.path)
    """
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LockedProject:
    return tiny_locked_project(tmp_path_factory.mktemp("ray"))


@pytest.fixture(scope="module")
def moved(tiny: LockedProject) -> Iterator[tuple[HubServer, str]]:
    """The Hub, running, with the attention kernel's v2 moved upstream since the lock: its new head."""
    with HubServer(tiny.root) as server:
        head = move_branch(tiny.root, TINY_ATTENTION, "v2")
        assert head != tiny.entry(TINY_ATTENTION).commit
        yield server, head


def _node_env(base: Path, name: str, hub: HubServer, **extra: str) -> dict[str, str]:
    """A node's environment: its own HOME and caches, the site's Hub, this environment's Python first on PATH."""
    home = base / name
    home.mkdir(parents=True, exist_ok=True)
    env = user_env_for(home, hub)
    return {**env, "HOME": str(home), "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", **extra}


@pytest.fixture(scope="module")
def cluster(tiny: LockedProject, moved: tuple[HubServer, str], tmp_path_factory) -> Iterator[RayCluster]:
    """A head node and a second node, each with its own HOME and empty kernel cache, and a resource "main" the
    jobs here ask for (nodes other tests add have none)."""
    base = tmp_path_factory.mktemp("nodes")
    server, _head = moved
    with RayCluster() as ray:
        ray.start(_node_env(base, "head", server), cpus=1, resources={"main": 4})
        ray.add_node(_node_env(base, "node2", server), cpus=1, resources={"main": 4})
        yield ray


def _driver(tiny: LockedProject, body: str, name: str, activate: bool) -> Path:
    script = tiny.project / name
    head = "import kernlock.activate\n" if activate else ""
    script.write_text(head + f"ATTENTION, ACTIVATION = {TINY_ATTENTION!r}, {TINY_ACTIVATION!r}\n" + WORKER + body)
    return script


def _reports(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


def _run(tiny: LockedProject, argv: list[str], env: dict[str, str], ray: RayCluster) -> subprocess.CompletedProcess:
    result = subprocess.run(
        argv, env={**tiny.env, **env, **QUIET}, cwd=tiny.project, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:] + ray.logs()
    return result


def test_every_train_worker_on_both_nodes_loads_the_locked_build(
    tiny: LockedProject, moved: tuple[HubServer, str], cluster: RayCluster, tmp_path: Path
) -> None:
    server, head = moved
    out, storage = tmp_path / "out", tmp_path / "storage"
    out.mkdir()
    driver = _driver(tiny, TRAINER, "train_driver.py", activate=True)
    result = _run(tiny, [sys.executable, str(driver), str(out), str(storage), cluster.address], server.env(), cluster)
    reports = _reports(out)
    assert sorted(r["rank"] for r in reports) == [0, 1]
    assert len({r["node"] for r in reports}) == 2, reports  # one worker on each node
    entry = tiny.entry(TINY_ATTENTION)
    for report in reports:
        assert report["loaded"][TINY_ATTENTION]["commit"] == entry.commit, (report, head)
        assert report["loaded"][TINY_ATTENTION]["identity"] == tiny.identity(TINY_ATTENTION)
        assert report["loaded"][TINY_ATTENTION]["calls"], report  # its attention ran
        assert report["mode"] == "strict"
    # Rank 0's checkpoint, as Ray Train persisted it, carries the lock of what that worker loaded.
    checkpoint = Path(result.stdout.split("CHECKPOINT", 1)[1].split()[0])
    carried = (checkpoint / "kernels.lock").read_text()
    assert entry.commit in carried and (checkpoint / "model.pt").exists()


TASKS = textwrap.dedent(
    """
    import sys
    import ray

    OUT, ADDRESS, COUNT = sys.argv[1], sys.argv[2], int(sys.argv[3])
    RUNTIME_ENV = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None


    @ray.remote(num_cpus=0, resources={"main": 1}, scheduling_strategy="SPREAD")
    def load(index):
        import importlib.util
        import kernels

        kernels.get_kernel(ATTENTION, version=2)
        report(OUT, f"task{index}", prefix=sys.prefix, tabulate=importlib.util.find_spec("tabulate") is not None)
        return index


    ray.init(address=ADDRESS, runtime_env=RUNTIME_ENV)
    print(ray.get([load.remote(i) for i in range(COUNT)]))
    """
)


def test_a_plain_driver_loads_the_moved_build_and_an_activated_one_the_locked_build(
    tiny: LockedProject, moved: tuple[HubServer, str], cluster: RayCluster, tmp_path: Path
) -> None:
    server, head = moved
    for activate, expected in ((False, head), (True, tiny.entry(TINY_ATTENTION).commit)):
        out = tmp_path / f"out-{activate}"
        out.mkdir()
        driver = _driver(tiny, TASKS, f"tasks_{activate}.py", activate=activate)
        _run(tiny, [sys.executable, str(driver), str(out), cluster.address, "4"], server.env(), cluster)
        reports = _reports(out)
        assert len(reports) == 4
        assert {r["loaded"][TINY_ATTENTION]["commit"] for r in reports} == {expected}, reports
        assert all((r["lockfile"] is not None) == activate for r in reports)


def test_ray_job_submit_with_kernlocks_runtime_env(
    tiny: LockedProject, moved: tuple[HubServer, str], tmp_path: Path
) -> None:
    """`ray job submit --runtime-env-json "$(kernlock ray-env)"`: a driver that never imports kernlock."""
    server, _head = moved
    out = tmp_path / "out"
    out.mkdir()
    driver = _driver(tiny, TASKS, "job_driver.py", activate=False)
    cluster = RayCluster()
    with cluster:
        cluster.start(_node_env(tmp_path, "head", server), cpus=2, resources={"main": 4}, jobs=True)
        _submit(tiny, server, cluster, driver, out)
    reports = _reports(out)
    assert len(reports) == 2
    assert {r["loaded"][TINY_ATTENTION]["commit"] for r in reports} == {tiny.entry(TINY_ATTENTION).commit}
    assert all(r["lockfile"] and r["lockfile"].endswith("kernels.lock") for r in reports)


def _submit(tiny: LockedProject, server: HubServer, cluster: RayCluster, driver: Path, out: Path) -> None:
    env = {**server.env(), **QUIET}
    runtime = subprocess.run(
        [str(BIN / "kernlock"), "ray-env"], env={**tiny.env, **env}, cwd=tiny.project, capture_output=True, text=True
    )
    assert runtime.returncode == 0, runtime.stderr
    assert json.loads(runtime.stdout)["worker_process_setup_hook"] == "kernlock.ray.setup_worker"
    argv = [str(BIN / "ray"), "job", "submit", "--address", cluster.jobs, "--runtime-env-json", runtime.stdout]
    argv += ["--working-dir", str(driver.parent), "--", "python", driver.name, str(out), "auto", "2"]
    _run(tiny, argv, env, cluster)


def test_a_job_with_its_own_uv_environment_on_each_node_honours_the_lock(
    tiny: LockedProject, moved: tuple[HubServer, str], cluster: RayCluster, tmp_path: Path
) -> None:
    """runtime_env={"uv": [...]}: Ray builds the job a virtualenv on each node (a clone of this one, plus the
    packages); its workers still load the locked build, nothing added to the job's runtime_env."""
    server, _head = moved
    out = tmp_path / "out"
    out.mkdir()
    driver = _driver(tiny, TASKS, "uv_job.py", activate=True)
    runtime = json.dumps({"uv": ["tabulate"]})
    _run(tiny, [sys.executable, str(driver), str(out), cluster.address, "2", runtime], server.env(), cluster)
    reports = _reports(out)
    assert len(reports) == 2
    assert all(r["tabulate"] and r["prefix"] != sys.prefix for r in reports), reports  # the job's own environment
    assert {r["loaded"][TINY_ATTENTION]["commit"] for r in reports} == {tiny.entry(TINY_ATTENTION).commit}


FRESH = textwrap.dedent(
    """
    import sys, time
    import ray

    OUT, ADDRESS, RESOURCE, COUNT = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


    @ray.remote(num_cpus=1, resources={RESOURCE: 1})
    def load(index, start):
        import kernels

        while time.time() < start:  # every worker asks at once
            time.sleep(0.01)
        try:
            kernels.get_kernel(ATTENTION, version=2)
            kernels.get_kernel(ACTIVATION, version=1)
        except Exception as err:
            report(OUT, f"failed{index}", error=f"{type(err).__name__}: {err}")
            raise
        report(OUT, f"task{index}")


    ray.init(address=ADDRESS)
    # The workers start first (one CPU each, as many as the node has), then all load at the same instant.
    start = time.time() + 8
    try:
        ray.get([load.remote(i, start) for i in range(COUNT)])
    except ray.exceptions.RayTaskError as err:
        print("TASK FAILED", type(err.cause).__name__)
    """
)


def test_a_node_without_the_builds_fetches_them_once_for_all_its_workers(
    tiny: LockedProject, moved: tuple[HubServer, str], cluster: RayCluster, tmp_path: Path
) -> None:
    """A node whose cache has nothing: its two workers, loading at the same instant, fetch the locked builds from
    the Hub once (each locked file one GET), verified; the cache then passes `kernlock verify`."""
    server, _head = moved
    node = _node_env(tmp_path, "fresh", server)
    cluster.add_node(node, cpus=2, resources={"fresh": 2})
    out = tmp_path / "out"
    out.mkdir()
    entries = [tiny.entry(TINY_ATTENTION), tiny.entry(TINY_ACTIVATION)]
    server.log.clear()
    driver = _driver(tiny, FRESH, "fresh.py", activate=True)
    _run(tiny, [sys.executable, str(driver), str(out), cluster.address, "fresh", "2"], server.env(), cluster)
    reports = _reports(out)
    assert len(reports) == 2 and len({r["pid"] for r in reports}) == 2
    for entry in entries:
        assert {r["loaded"][entry.repo]["commit"] for r in reports} == {entry.commit}
        variant = entry.variant_for(tiny.environment)
        assert variant is not None
        fetched = [e.path for e in server.log.snapshot() if e.method == "GET" and f"/resolve/{entry.commit}/" in e.path]
        assert sorted(fetched) == sorted(set(fetched)) and len(fetched) == len(variant.files), fetched
    commits = {entry.commit for entry in entries}
    assert not [e for e in server.log.snapshot() if "/resolve/" in e.path and not any(c in e.path for c in commits)]
    verified = subprocess.run(
        [str(BIN / "kernlock"), "verify"], env=node, cwd=tiny.project, capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_offline_node_without_the_builds_refuses_in_one_line(
    tiny: LockedProject, moved: tuple[HubServer, str], cluster: RayCluster, tmp_path: Path
) -> None:
    server, _head = moved
    cluster.add_node(_node_env(tmp_path, "offline", server, HF_HUB_OFFLINE="1"), cpus=1, resources={"offline": 1})
    out = tmp_path / "out"
    out.mkdir()
    server.log.clear()
    driver = _driver(tiny, FRESH, "offline.py", activate=True)
    result = _run(tiny, [sys.executable, str(driver), str(out), cluster.address, "offline", "1"], server.env(), cluster)
    assert "TASK FAILED NotSyncedError" in result.stdout, result.stdout
    (failed,) = _reports(out)
    assert TINY_ATTENTION not in failed["loaded"]
    error = failed["error"]
    assert "\n" not in error and error.startswith("NotSyncedError: ")
    assert "HF_HUB_OFFLINE=1" in error and "`kernlock sync`" in error and "`kernlock bundle`" in error
    assert not [e for e in server.log.snapshot() if "/resolve/" in e.path]  # it asked the Hub nothing


LOCAL = textwrap.dedent(
    """
    import sys
    import ray

    OUT, TEMP = sys.argv[1], sys.argv[2]


    @ray.remote(num_cpus=1)
    def load(index):
        import kernels

        kernels.get_kernel(ATTENTION, version=2)
        report(OUT, f"task{index}")


    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=TEMP)  # a cluster of its own, on this machine
    ray.get([load.remote(i) for i in range(2)])
    ray.shutdown()
    """
)


@pytest.mark.binds
def test_kernlock_run_of_a_driver_that_starts_its_own_cluster(
    tiny: LockedProject, moved: tuple[HubServer, str], tmp_path: Path
) -> None:
    """`kernlock run -- python driver.py`, whose ray.init() starts a local cluster: its workers load the locked
    build, and nothing of that cluster outlives the driver."""
    server, _head = moved
    out = tmp_path / "out"
    out.mkdir()
    driver = _driver(tiny, LOCAL, "local.py", activate=False)
    local = RayCluster()  # only its short folder and its check for processes left behind
    argv = [str(BIN / "kernlock"), "run", "--", sys.executable, str(driver), str(out), str(local.temp)]
    _run(tiny, argv, server.env(), local)
    reports = _reports(out)
    assert len(reports) == 2
    assert {r["loaded"][TINY_ATTENTION]["commit"] for r in reports} == {tiny.entry(TINY_ATTENTION).commit}
    assert all(r["mode"] == "strict" for r in reports)
    assert not local.left()
    local.stop()


@pytest.mark.binds
def test_kernlock_run_record_lists_every_workers_loaded_build_on_both_nodes(
    tiny: LockedProject, moved: tuple[HubServer, str], cluster: RayCluster, tmp_path: Path
) -> None:
    """`kernlock run --record -- python driver.py` (Ray Train, one worker on each node): the record lists the locked
    build each worker loaded, on two nodes."""
    server, _head = moved
    out, storage = tmp_path / "out", tmp_path / "storage"
    out.mkdir()
    driver = _driver(tiny, TRAINER, "record_driver.py", activate=False)
    argv = [str(BIN / "kernlock"), "run", "--record", "--dry-run", "--", sys.executable, str(driver)]
    result = _run(tiny, [*argv, str(out), str(storage), cluster.address], server.env(), cluster)
    entry = tiny.entry(TINY_ATTENTION)
    nodes = sorted(r["node"][:12] for r in _reports(out))
    builds = result.stdout.split("Locked builds loaded:\n")[1]
    (row,) = [line.split(maxsplit=5) for line in builds.splitlines() if line.startswith(TINY_ATTENTION)]
    assert row[:5] == [TINY_ATTENTION, entry.commit[:12], entry.variant_for(tiny.environment).name, "2", "2"]
    assert row[5] == f"({', '.join(nodes)})", (row, nodes)
