"""Ranks whose launcher filters the environment honour the lock, or stop at their first kernel import (issue 24).

DeepSpeed's multi-node runners forward only ``PYTHON*`` variables (and a few others); ``srun --export=NONE`` and
``env -i`` forward none; a remote node's HOME is its own. Each test starts its "ranks" the way such a launcher
does, from a locked project whose Hub is stopped (any request would fail, and every socket is recorded):

- `kernlock run` carries its settings in the sitecustomize it writes beside the lock, so a rank that gets only
  ``PYTHONPATH`` still honours the lock, the mode and the cache;
- `kernlock hook install` binds an environment with a ``.pth`` startup hook, so a rank that gets no variable at all
  does too, and a bound lock missing on the node stops the rank at its first kernel import with one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from installs import overlay_venv
from processes import RANK_PRELUDE
from projects import TINY_ACTIVATION, TINY_ATTENTION, LockedProject, tiny_locked_project

pytestmark = pytest.mark.subprocess

UNLOCKED = "kernels-community/rotary"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LockedProject:
    return tiny_locked_project(tmp_path_factory.mktemp("hook"))


@pytest.fixture
def hooked(tmp_path: Path) -> Path:
    """A fresh environment of its own (this one's packages, a site-packages a test may change): its interpreter."""
    return overlay_venv(tmp_path / "venv")


RANK = RANK_PRELUDE + textwrap.dedent(
    f"""
        model, result = train_llama("{TINY_ATTENTION}")
        identity = kernels.get_kernel("{TINY_ACTIVATION}", version=1).KERNEL_IDENTITY
        settings = activated.settings()
        refused = None
        try:
            if settings is None or settings.mode == "strict":  # in warn mode it would load, unlocked, from the Hub
                kernels.get_kernel("{UNLOCKED}", version=1)
        except Exception as err:
            refused = str(err)
        report(mode=settings and settings.mode, refused=refused, home=os.environ.get("HOME"), **result)
        """
)

# A launcher of ranks: each rank gets only what the launcher passes on (PYTHON* or nothing) and a HOME of its own.
LAUNCHER = textwrap.dedent(
    """
    import os, subprocess, sys
    keep, ranks, rank_py, script = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    codes = []
    for rank in range(ranks):
        home = os.path.join(os.path.dirname(script), f"home{rank}")
        os.makedirs(home, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if keep == "python" and k.startswith("PYTHON")}
        env["HOME"] = home
        codes.append(subprocess.run([rank_py, script], env=env).returncode)
    sys.exit(max(codes))
    """
)


def _launch(tiny: LockedProject, tmp_path: Path, argv: list[str], keep: str, rank_py: str, ranks: int = 2):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    return tiny.run_argv([*argv, sys.executable, str(launcher), keep, str(ranks), rank_py, str(script)])


def _reports(child) -> list[dict]:
    import json

    return [json.loads(line[len("REPORT ") :]) for line in child.stdout.splitlines() if line.startswith("REPORT ")]


def _assert_ranks_locked(tiny: LockedProject, child, ranks: int, mode: str) -> None:
    assert child.returncode == 0, child.stderr[-4000:]
    reports = _reports(child)
    assert len(reports) == ranks, child.stdout
    for report in reports:
        assert report["loaded"][TINY_ATTENTION]["identity"] == tiny.identity(TINY_ATTENTION)
        assert report["loaded"][TINY_ACTIVATION]["commit"] == tiny.entry(TINY_ACTIVATION).commit
        assert report["loaded"][TINY_ATTENTION]["calls"], "the locked attention kernel ran"
        assert report["connects"] == [] and report["q_grad"] > 0
        assert report["mode"] == mode
        if mode == "strict":
            assert f"kernlock add {UNLOCKED}" in report["refused"]
    assert len({r["home"] for r in reports}) == ranks


@pytest.mark.binds
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["strict", "warn"])
def test_run_behind_a_python_vars_launcher_honours_lock_mode_and_cache(tiny: LockedProject, tmp_path: Path, mode):
    """`kernlock run --mode M -- launcher`: ranks get PYTHONPATH and nothing else (no KERNLOCK_*, no HF_* cache
    variable, their own HOME) and still train on the locked builds from the synced cache in mode M."""
    kernlock_run = [sys.executable, "-m", "kernlock", "run", "--mode", mode, "--"]
    child = _launch(tiny, tmp_path, kernlock_run, "python", sys.executable)
    _assert_ranks_locked(tiny, child, 2, mode)


@pytest.mark.binds
def test_run_keeps_its_sitecustomize_beside_the_lock_not_in_home(tiny: LockedProject, tmp_path: Path):
    """The sitecustomize is on the job's filesystem (beside the lock), ignored by git, and none is under HOME."""
    home = tmp_path / "login-home"
    home.mkdir()
    env = {"HOME": str(home)}
    env_no_cache = {k: v for k, v in tiny.env.items() if k != "KERNLOCK_CACHE"}
    code = "import os, sys; print([p for p in sys.path if 'kernlock' in p and 'run' in p][0])"
    result = subprocess.run(
        [sys.executable, "-m", "kernlock", "run", "--", sys.executable, "-c", code],
        env={**env_no_cache, **env},
        cwd=tiny.project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    site = Path(result.stdout.strip().splitlines()[-1])
    assert site.parent.parent == tiny.project / ".kernlock" and (site / "sitecustomize.py").is_file()
    assert (tiny.project / ".kernlock" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert not list(home.rglob("sitecustomize.py"))


@pytest.mark.slow
def test_hook_install_binds_the_environment_for_ranks_that_get_no_variable(
    tiny: LockedProject, tmp_path: Path, hooked: Path
):
    """`env -i`-like ranks (nothing but their own HOME) of a hooked environment honour the bound lock, mode and
    cache; `kernlock hook status` says what is bound, `uninstall` removes it."""
    lock = tiny.project / "kernels.lock"
    result = run_cli_in(hooked, tiny, "hook", "install", "--lockfile", str(lock), "--mode", "warn")
    assert result.returncode == 0, result.stderr
    assert f"lock {lock}" in result.stdout and "mode warn" in result.stdout
    child = _launch(tiny, tmp_path, [], "none", str(hooked))
    _assert_ranks_locked(tiny, child, 2, "warn")
    status = run_cli_in(hooked, tiny, "hook", "status")
    assert status.returncode == 0 and f"lock {lock}" in status.stdout, status.stderr
    removed = run_cli_in(hooked, tiny, "hook", "uninstall")
    assert removed.returncode == 0 and "removed the kernlock hook" in removed.stdout
    assert "no kernlock hook in" in run_cli_in(hooked, tiny, "hook", "status").stdout


@pytest.mark.slow
def test_hook_without_lockfile_strict_refuses_an_unlocked_repo_on_every_rank(
    tiny: LockedProject, tmp_path: Path, hooked: Path
):
    """Unbound, the hook honours the nearest kernels.lock (the ranks start in the project folder), strict."""
    assert run_cli_in(hooked, tiny, "hook", "install").returncode == 0
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    reports = []
    for rank in range(2):
        home = tmp_path / f"home{rank}"
        home.mkdir()
        done = subprocess.run(
            ["env", "-i", f"HOME={home}", str(hooked), str(script)],
            cwd=tiny.project,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        reports.append(done)
    for done in reports:
        report = _reports(done)[0]
        assert report["mode"] == "strict" and report["connects"] == []
        assert f"kernlock add {UNLOCKED}" in report["refused"]
        assert report["loaded"][TINY_ACTIVATION]["commit"] == tiny.entry(TINY_ACTIVATION).commit


def test_a_bound_lock_missing_on_the_node_stops_the_rank_at_its_first_kernel_import(
    tiny: LockedProject, tmp_path: Path, hooked: Path
):
    """The hook binds a lock this "node" does not have: a process that never imports kernels runs as before; the
    rank runs until its first kernel import, then stops with exit 1 and one line naming the lock and the fix."""
    elsewhere = tmp_path / "shared-fs" / "kernels.lock"
    elsewhere.parent.mkdir()
    shutil.copy(tiny.project / "kernels.lock", elsewhere)
    assert run_cli_in(hooked, tiny, "hook", "install", "--lockfile", str(elsewhere)).returncode == 0
    elsewhere.unlink()
    status = run_cli_in(hooked, tiny, "hook", "status")
    assert "missing on this machine" in status.stdout, status.stdout
    plain = subprocess.run(["env", "-i", str(hooked), "-c", "print('fine')"], capture_output=True, text=True)
    assert plain.returncode == 0 and plain.stdout == "fine\n" and plain.stderr == ""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    done = subprocess.run(
        ["env", "-i", f"HOME={tmp_path}", str(hooked), str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1
    assert done.stdout == "started\n", "the rank ran until its first kernel import, and loaded nothing"
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: kernlock hook (") and f"no lock file at {elsewhere}" in lines[0]
    assert "`kernlock lock`" in lines[0]


def run_cli_in(python: Path, tiny: LockedProject, *args: str) -> subprocess.CompletedProcess:
    """``kernlock ARGS`` run by ``python`` (the hooked environment's own kernlock)."""
    env = {**tiny.env, "PATH": os.environ.get("PATH", "")}
    return subprocess.run(
        [str(python), "-m", "kernlock", *args], env=env, cwd=tiny.project, capture_output=True, text=True, timeout=120
    )
