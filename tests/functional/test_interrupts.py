"""Interrupts: SIGINT/SIGTERM stop `sync`, `lock` and `add` at once (exit 130/143), SIGKILL at any moment leaves
nothing partial visible, and the next run resumes. The moments are random but seeded; the Hub is slowed down so
that they fall inside the downloads and requests."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from projects import CPU_ENV, write_pyproject

from kernlock import api
from kernlock.lock import file as lockfile
from kernlock.sync import engine as syncing
from kernlock.testing import HubServer

PAGED = "kernels-community/paged-attention"
SEEDS = (1, 2, 3)


def _start(args: list[str], env: dict[str, str], hub: HubServer) -> subprocess.Popen:
    """Start ``kernlock ARGS`` and return once it has sent its first request (its handlers are installed)."""
    started = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernlock", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if any(request.started >= started for request in hub.log.snapshot()):  # not an earlier process's request
            break
        time.sleep(0.02)
    return proc


def _interrupt(proc: subprocess.Popen, sig: int, delay: float) -> tuple[int, str]:
    time.sleep(delay)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=10)  # a process that does not stop fails the test here
    return proc.returncode, err


def _assert_nothing_partial_visible(project: Path, cache: Path) -> None:
    """Every file the snapshot shows is a verified blob; no stray temporary file in a variant folder."""
    lock = lockfile.read(project / "kernels.lock")
    for problem in syncing.verify(lock, [], cache=cache).problems:
        assert problem.kind.value in ("missing", "not synced"), str(problem)


@pytest.mark.subprocess
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_sync_and_the_next_run_resumes(
    seed: int, sig: int, user_env: dict[str, str], hub: HubServer, project: Path
):
    write_pyproject(project, f'"{PAGED}" = "v1"\n', [CPU_ENV])
    api.lock(project)
    hub.faults.latency(1.5, match="/resolve/")
    proc = _start(["sync", "--project", str(project)], user_env, hub)
    code, err = _interrupt(proc, sig, random.Random(seed).uniform(0.0, 2.0))
    assert code == 128 + sig, err
    assert "interrupted" in err and "Traceback" not in err
    cache = Path(user_env["HF_HUB_CACHE"])
    _assert_nothing_partial_visible(project, cache)
    hub.faults.clear()
    assert api.sync(project, progress=False)
    assert syncing.verify(lockfile.read(project / "kernels.lock"), [CPU_ENV], cache=cache).problems == ()


@pytest.mark.subprocess
@pytest.mark.parametrize("seed", SEEDS)
def test_sigint_stops_lock_and_add_with_nothing_written(
    seed: int, user_env: dict[str, str], hub: HubServer, project: Path
):
    write_pyproject(project, f'"{PAGED}" = "v1"\n', [CPU_ENV])
    before = (project / "pyproject.toml").read_text()
    hub.faults.latency(0.5, match="/api/")
    delay = random.Random(seed).uniform(0.0, 1.0)
    for args in (["lock"], ["add", "kernels-community/activation@v1"]):
        proc = _start([*args, "--project", str(project)], user_env, hub)
        code, err = _interrupt(proc, signal.SIGINT, delay)
        assert code == 130, err
        assert not (project / "kernels.lock").exists()
        assert (project / "pyproject.toml").read_text() == before
        assert [p.name for p in project.iterdir()] == ["pyproject.toml"]  # no temporary file left


@pytest.mark.subprocess
@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_at_a_random_moment_leaves_a_consistent_state(
    seed: int, user_env: dict[str, str], hub: HubServer, project: Path
):
    write_pyproject(project, f'"{PAGED}" = "v1"\n', [CPU_ENV])
    hub.faults.latency(0.3)
    proc = _start(["add", "kernels-community/activation@v1", "--project", str(project)], user_env, hub)
    _interrupt(proc, signal.SIGKILL, random.Random(seed).uniform(0.0, 3.0))
    lock_path = project / "kernels.lock"
    if lock_path.exists():
        lockfile.read(lock_path)  # whole or absent, never half a lock
        _assert_nothing_partial_visible(project, Path(user_env["HF_HUB_CACHE"]))
    hub.faults.clear()
    api.add(project, ["kernels-community/activation@v1"])
    api.sync(project, progress=False)
    assert syncing.verify(lockfile.read(lock_path), [CPU_ENV]).problems == ()


class _Killed(BaseException):
    """The process is killed at this point: nothing after it runs, no handler, no cleanup."""


def test_a_kill_just_after_a_file_is_linked_leaves_nothing_partial_visible(
    user_env: dict[str, str], hub: HubServer, project: Path, monkeypatch: pytest.MonkeyPatch
):
    """The moment a SIGKILL above (and tests/functional/test_airgap.py's) hits only now and then: sync has just made a
    snapshot link. What the variant folder holds then is that link, never a temporary entry beside it (which
    verify reports as a file kernels.lock does not name); the next sync completes."""
    write_pyproject(project, f'"{PAGED}" = "v1"\n', [CPU_ENV])
    api.lock(project)
    symlink = os.symlink

    def killed_after(target: str, link: str, *args: object, **kwargs: object) -> None:
        symlink(target, link, *args, **kwargs)  # type: ignore[arg-type]
        raise _Killed(link)

    monkeypatch.setattr(os, "symlink", killed_after)
    with pytest.raises(_Killed):
        api.sync(project, progress=False)
    monkeypatch.setattr(os, "symlink", symlink)
    _assert_nothing_partial_visible(project, Path(user_env["HF_HUB_CACHE"]))
    api.sync(project, progress=False)
    assert syncing.verify(lockfile.read(project / "kernels.lock"), [CPU_ENV]).problems == ()
