"""The runtime_env kernlock gives a Ray job (kernlock.ray; docs/ray.md): merged into the job's own, the lock shipped
as a package, the worker setup hook and the driver's runtime_env hook each chained after one the job already had.
Real Ray runs in tests/system/test_ray.py; here, what a user passes and gets back."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from envs import clean_env

from kernlock.errors import ActivationError, DamagedLockError
from kernlock.runtime import ray_jobs

LOCK = Path(__file__).resolve().parent.parent / "data" / "locks" / "v3.lock"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a kernels.lock, and kernlock's cache of this test alone."""
    monkeypatch.setenv("KERNLOCK_CACHE", str(tmp_path / "kernlock-cache"))
    monkeypatch.delenv("KERNELS_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "kernels.lock").write_bytes(LOCK.read_bytes())
    return folder


def _package(env: dict) -> Path:
    (path,) = [Path(p) for p in env["py_modules"] if Path(p).name.startswith("kernlock_lock_")]
    return path


def test_merged_into_the_jobs_runtime_env_which_keeps_all_it_had(project: Path) -> None:
    job = {
        "uv": ["tabulate"],
        "env_vars": {"MINE": "1"},
        "py_modules": ["/site/my_module"],
        "worker_process_setup_hook": "my_setup.configure",
    }
    given = json.loads(json.dumps(job))
    env = ray_jobs.runtime_env(job, lockfile=project / "kernels.lock")
    assert job == given  # the job's own dict is not changed
    assert env["uv"] == ["tabulate"] and env["env_vars"]["MINE"] == "1"
    package = _package(env)
    assert env["py_modules"] == ["/site/my_module", str(package)]
    assert env["worker_process_setup_hook"] == "kernlock.ray.setup_worker"
    assert env["env_vars"][ray_jobs.PACKAGE_ENV] == package.name
    assert env["env_vars"][ray_jobs.NEXT_SETUP_ENV] == "my_setup.configure"  # run after kernlock's
    # The package: the lock's bytes and the settings, named after both, kept beside the lock (the user's alone).
    assert package.parent == project / ".kernlock" / "ray"
    assert (package / "kernels.lock").read_bytes() == LOCK.read_bytes()
    namespace: dict = {}
    exec((package / "__init__.py").read_text(), namespace)
    assert namespace["SETTINGS"] == {"KERNLOCK_MODE": "strict"} and namespace["LOCK"] == "kernels.lock"
    # Merging again (the hook of a driver that was also given kernlock.ray.runtime_env()) changes nothing.
    assert ray_jobs.runtime_env(env, lockfile=project / "kernels.lock") == env
    # Another mode is another package.
    warn = ray_jobs.runtime_env(None, lockfile=project / "kernels.lock", mode="warn")
    assert _package(warn) != package and warn["env_vars"] == {ray_jobs.PACKAGE_ENV: _package(warn).name}


def test_the_cache_travels_only_when_it_was_chosen(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's default kernel cache is under its own HOME: only a cache the user chose (a shared one) is carried."""
    lock = project / "kernels.lock"
    default = ray_jobs.runtime_env(None, lockfile=lock)
    assert "KERNELS_CACHE" not in (_package(default) / "__init__.py").read_text()
    monkeypatch.setenv("KERNELS_CACHE", "/shared/kernels")
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.site:8080")
    chosen = (_package(ray_jobs.runtime_env(None, lockfile=lock)) / "__init__.py").read_text()
    assert "'KERNELS_CACHE': '/shared/kernels'" in chosen and "'HF_ENDPOINT': 'http://mirror.site:8080'" in chosen


def test_a_setup_hook_kernlock_cannot_chain_is_refused_in_one_line(project: Path) -> None:
    with pytest.raises(ActivationError) as refused:
        ray_jobs.runtime_env({"worker_process_setup_hook": print}, lockfile=project / "kernels.lock")
    message = str(refused.value)
    assert "\n" not in message and "'module.function' string" in message
    assert (
        refused.value.fix == "give it as a 'module.function' string, and kernlock runs it after activating the worker"
    )


def test_a_hand_edited_lock_is_refused_before_anything_is_shipped(project: Path) -> None:
    lock = project / "kernels.lock"
    lock.write_text(lock.read_text().replace('commit = "', 'commit = "0', 1))
    with pytest.raises(DamagedLockError) as refused:
        ray_jobs.runtime_env(None, lockfile=lock)
    assert "\n" not in str(refused.value) and "`kernlock lock`" in str(refused.value)
    assert not (project / ".kernlock" / "ray").exists()  # no package of it for Ray to upload


def test_no_lock_is_one_line_naming_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KERNLOCK_LOCKFILE", raising=False)
    with pytest.raises(ActivationError, match="Run `kernlock lock` in the project"):
        ray_jobs.runtime_env()


@pytest.mark.subprocess
def test_kernlock_ray_env_prints_the_merged_runtime_env(project: Path, tmp_path: Path) -> None:
    env = clean_env(KERNLOCK_CACHE=str(tmp_path / "kernlock-cache"))
    job = tmp_path / "runtime_env.yaml"
    job.write_text("pip:\n  - tabulate\nenv_vars:\n  MINE: '1'\n")
    argv = [sys.executable, "-m", "kernlock", "ray-env", "--mode", "warn", "--merge", str(job)]
    printed = subprocess.run(argv, env=env, cwd=project, capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    merged = json.loads(printed.stdout)
    assert merged["pip"] == ["tabulate"] and merged["env_vars"]["MINE"] == "1"
    assert "'KERNLOCK_MODE': 'warn'" in (_package(merged) / "__init__.py").read_text()
    bad = subprocess.run([*argv[:-1], '{"pip": '], env=env, cwd=project, capture_output=True, text=True)
    assert bad.returncode == 2 and "is no runtime_env" in bad.stderr


# A worker: the package on its path as Ray unpacks py_modules, a node with its own cache and KERNLOCK_MODE, a job
# setup hook of its own; then a driver whose RAY_RUNTIME_ENV_HOOK was set before kernlock activated and imported ray.
WORKER = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, os.environ["PACKAGES"])
    import ray
    from kernlock import ray as kernlock_ray
    from kernlock.runtime import state

    kernlock_ray.setup_worker()
    settings = state.settings()
    print(json.dumps({
        "ray_started": ray.is_initialized(),
        "lockfile": settings.lockfile, "mode": settings.mode, "cache": os.environ.get("KERNELS_CACHE"),
        "chained": os.environ.get("CHAINED"), "node": os.environ.get("KERNLOCK_NODE"),
    }))
    """
)
HOOKS = textwrap.dedent(
    """
    import os


    def configure():
        os.environ["CHAINED"] = "yes"


    def their_hook(env):
        env = dict(env or {})
        env["conda"] = "theirs"
        return env
    """
)
DRIVER = textwrap.dedent(
    """
    import json, os
    import kernlock.activate
    import ray  # activation points Ray's runtime_env hook at kernlock's, keeping theirs as the next
    from kernlock import ray as kernlock_ray

    merged = kernlock_ray.runtime_env_hook({"pip": ["x"]})
    print(json.dumps({
        "hook": os.environ["RAY_RUNTIME_ENV_HOOK"], "next": os.environ.get("KERNLOCK_RAY_NEXT_HOOK"), "env": merged,
    }))
    """
)


@pytest.mark.subprocess
def test_a_worker_takes_the_jobs_lock_and_mode_keeps_its_nodes_cache_and_runs_the_jobs_hook(
    project: Path, tmp_path: Path
) -> None:
    runtime = ray_jobs.runtime_env(
        {"worker_process_setup_hook": "my_hooks.configure"}, lockfile=project / "kernels.lock"
    )
    package = _package(runtime)
    (tmp_path / "my_hooks.py").write_text(HOOKS)
    env = clean_env(
        PACKAGES=str(package.parent),
        PYTHONPATH=str(tmp_path),
        KERNELS_CACHE=str(tmp_path / "node-cache"),  # the node's own: kept
        KERNLOCK_MODE="warn",  # the node's: the job's strict wins
        **runtime["env_vars"],
    )
    child = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert child.returncode == 0, child.stderr
    found = json.loads(child.stdout)
    assert found["lockfile"] == str(package / "kernels.lock") and found["mode"] == "strict"
    assert found["cache"] == str(tmp_path / "node-cache") and found["chained"] == "yes"
    assert found["node"]  # not a Ray worker here: the host's name
    assert found["ray_started"] is False  # asking Ray for the node where it is not connected would start a cluster

    env = clean_env(PYTHONPATH=str(tmp_path), RAY_RUNTIME_ENV_HOOK="my_hooks.their_hook", KERNLOCK_CACHE=str(tmp_path))
    driver = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, cwd=project)
    assert driver.returncode == 0, driver.stderr
    found = json.loads(driver.stdout)
    assert found["hook"] == "kernlock.ray.runtime_env_hook" and found["next"] == "my_hooks.their_hook"
    assert found["env"]["conda"] == "theirs" and found["env"]["pip"] == ["x"]  # theirs ran, the job's kept
    assert found["env"]["worker_process_setup_hook"] == "kernlock.ray.setup_worker"
