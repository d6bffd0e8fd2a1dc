"""`kernlock run -- <a launcher that passes no environment>`: every process of the run honours the lock, or stops
at its first kernel import with one line naming the fix; never an unlocked load (issue 29, item 3).

`env -i`, `srun --export=NONE`, pdsh and ssh start each rank with nothing of `kernlock run`'s environment: no
``PYTHONPATH`` (so no sitecustomize), no ``KERNLOCK_*``. Each test here runs kernlock from a fresh environment of
its own (tests/installs.overlay_venv: a site-packages the run may bind), starts its ranks with ``env -i`` and a
HOME of their own, and moves the upstream branch first with the Hub running: an unlocked rank loads the moved
build, a locked one the locked build from the synced cache with no socket opened.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest
from installs import overlay_venv
from processes import RANK_PRELUDE
from projects import TINY_ACTIVATION, LockedProject, tiny_locked_project

from kernlock.commands import runbind
from kernlock.testing import HubServer, move_branch
from kernlock.util.processes import started

pytestmark = pytest.mark.subprocess  # every test here starts kernlock, Python or a server process

RANK = RANK_PRELUDE + textwrap.dedent(
    f"""
    kernels.get_kernel("{TINY_ACTIVATION}", version=1)
    settings = activated.settings()
    report(home=os.environ.get("HOME"), lockfile=settings and settings.lockfile, mode=settings and settings.mode)
    """
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LockedProject:
    return tiny_locked_project(tmp_path_factory.mktemp("run-bind"))


@pytest.fixture(scope="module")
def moved(tiny: LockedProject):
    """The Hub, running, with the activation kernel's v1 moved upstream since the lock: its new head."""
    with HubServer(tiny.root) as server:
        head = move_branch(tiny.root, TINY_ACTIVATION, "v1")
        assert head != tiny.entry(TINY_ACTIVATION).commit
        yield server, head


@pytest.fixture
def python(tmp_path: Path) -> Path:
    """A fresh environment of its own (this one's packages): its interpreter, which runs kernlock and the ranks."""
    return overlay_venv(tmp_path / "venv")


def _path(python: Path, tmp_path: Path) -> str:
    return f"{tmp_path / 'launchers'}:{python.parent}:/usr/bin:/bin"


def _site(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


def _bindings(python: Path) -> list[Path]:
    return sorted(_site(python).glob(f"{runbind.PTH_PREFIX}*.pth"))


# Stand-ins for launchers that are not installed here (srun, pdsh, ssh): each starts its command (from the word
# `python` on) as two tasks with nothing of its own environment but a PATH, a HOME per task and the site's Hub, as
# `srun --export=NONE`, pdsh and ssh do. `env -i` is the real one.
STAND_IN = """#!/bin/sh
while [ "$1" != python ]; do shift; done
for task in 0 1; do
  env -i PATH="$RANK_PATH" HOME="$RANK_HOMES/home$task" HF_ENDPOINT="$RANK_HUB" HF_HUB_DISABLE_XET=1 "$@" || exit $?
done
"""
LAUNCHERS = {
    "env -i": None,
    "srun --export=NONE": ["srun", "--export=NONE", "--ntasks=2"],
    "pdsh": ["pdsh", "-w", "node1,node2"],
    "ssh": ["ssh", "node1"],
}


def _env_i(python: Path, tmp_path: Path, home: Path, hub: str, *argv: str) -> list[str]:
    """What `srun --export=NONE`, pdsh and ssh give a rank: a PATH, a HOME of its own, the site's Hub; no more."""
    home.mkdir(parents=True, exist_ok=True)
    return ["env", "-i", f"PATH={_path(python, tmp_path)}", f"HOME={home}", f"HF_ENDPOINT={hub}",
            "HF_HUB_DISABLE_XET=1", "python", *argv]  # fmt: skip


def _rank_commands(launcher: str, python: Path, tmp_path: Path, hub: str, script: Path) -> list[list[str]]:
    """CMD for each `kernlock run` that starts two ranks: `env -i` once per rank, a stand-in once for both."""
    argv = LAUNCHERS[launcher]
    if argv is None:
        return [_env_i(python, tmp_path, tmp_path / f"home{rank}", hub, str(script)) for rank in range(2)]
    stand_in = tmp_path / "launchers" / argv[0]
    stand_in.parent.mkdir(exist_ok=True)
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    for rank in range(2):
        (tmp_path / f"home{rank}").mkdir(exist_ok=True)
    return [[*argv, "python", str(script)]]


def _kernlock(
    tiny: LockedProject, python: Path, tmp_path: Path, *argv: str, hub: str = "", prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """`kernlock run --project P -- ARGV` by ``python`` (the test's own environment), from outside the project."""
    env = {**tiny.env, "PATH": _path(python, tmp_path), "RANK_PATH": _path(python, tmp_path)}
    env.update(RANK_HOMES=str(tmp_path), RANK_HUB=hub)
    return subprocess.run(
        [*prefix, str(python), "-m", "kernlock", "run", "--project", str(tiny.project), "--", *argv],
        env=env, cwd=tiny.project.parent, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _reports(done: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line[len("REPORT ") :]) for line in done.stdout.splitlines() if line.startswith("REPORT ")]


def _assert_locked(tiny: LockedProject, report: dict, head: str) -> None:
    assert report["loaded"][TINY_ACTIVATION]["commit"] == tiny.entry(TINY_ACTIVATION).commit != head
    assert report["loaded"][TINY_ACTIVATION]["identity"] == tiny.identity(TINY_ACTIVATION)
    assert report["connects"] == [] and report["mode"] == "strict"
    assert report["lockfile"] == str(tiny.project / "kernels.lock")


def _plain_rank(python: Path, tmp_path: Path, hub: str, script: Path) -> dict:
    """A rank started with `env -i` outside any `kernlock run`: what it loaded."""
    done = subprocess.run(_env_i(python, tmp_path, tmp_path / "plain", hub, str(script)), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0 and done.stderr.count("error") == 0, done.stderr[-3000:]
    [report] = _reports(done)
    return report


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_ranks_that_get_no_environment_honour_the_lock(tiny: LockedProject, moved, python: Path, tmp_path, launcher):
    """`kernlock run --project P -- env -i PATH=... HOME=<rank home> python rank.py` for two ranks, after upstream
    moved v1 (and the same behind srun --export=NONE, pdsh, ssh): each rank loads the locked commit from the synced
    cache, with no socket opened. Before the fix each loaded the moved build, unlocked, and `kernlock run` exited 0
    without a word. When the run ends, nothing stays bound."""
    server, head = moved
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    reports = []
    for cmd in _rank_commands(launcher, python, tmp_path, server.url, script):
        done = _kernlock(tiny, python, tmp_path, *cmd, hub=server.url)
        assert done.returncode == 0, done.stderr[-3000:]
        reports += _reports(done)
    assert [r["home"] for r in reports] == [str(tmp_path / "home0"), str(tmp_path / "home1")]
    for report in reports:
        _assert_locked(tiny, report, head)
    assert _bindings(python) == [], "the run's binding is gone"


def test_after_the_run_a_plain_rank_loads_unlocked_again(tiny: LockedProject, moved, python: Path, tmp_path):
    """The binding lasts as long as the run: an `env -i` rank started after it loads the moved build."""
    server, head = moved
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    done = _kernlock(tiny, python, tmp_path, *_env_i(python, tmp_path, tmp_path / "home0", server.url, str(script)))
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_locked(tiny, _reports(done)[0], head)
    assert _bindings(python) == [] and (_site(python) / "_kernlock_run.py").is_file()
    after = _plain_rank(python, tmp_path, server.url, script)
    assert after["loaded"][TINY_ACTIVATION]["commit"] == head and after["lockfile"] is None


def test_a_killed_run_leaves_a_binding_that_binds_nothing(tiny: LockedProject, moved, python: Path, tmp_path):
    """SIGKILL `kernlock run` mid-run: CMD dies with it (nothing of the run goes on unbound), its binding stays
    behind but binds no later process (that pid no longer runs), and the next `kernlock run` removes it."""
    server, head = moved
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    sleeper = "import os, time; print(os.getpid(), flush=True); time.sleep(300)"
    env = {**tiny.env, "PATH": _path(python, tmp_path)}
    argv = [str(python), "-m", "kernlock", "run", "-q", "--project", str(tiny.project), "--"]
    run = subprocess.Popen([*argv, *_env_i(python, tmp_path, tmp_path / "h", server.url, "-c", sleeper)], env=env,
                           stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert run.stdout is not None
    child = int(run.stdout.readline())
    [left] = _bindings(python)
    run.kill()
    run.wait(timeout=60)
    for _ in range(600):  # CMD is not this process's child: watch its pid (a zombie does not run)
        if started(child) is None:
            break
        subprocess.run(["sleep", "0.1"], check=True)
    assert started(child) is None, "CMD outlived the killed kernlock run"
    assert _bindings(python) == [left] and runbind.read_owner(left) is not None
    stale = _plain_rank(python, tmp_path, server.url, script)
    assert stale["loaded"][TINY_ACTIVATION]["commit"] == head and stale["lockfile"] is None
    done = subprocess.run([*argv, "true"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _bindings(python) == [], "the next run removed what the killed one left"


def _bind_by_hand(tiny: LockedProject, python: Path, lockfile: Path, command: tuple[str, ...]) -> runbind.Binding:
    """A binding of ``python``'s environment as a `kernlock run` of ``lockfile`` in this (live) process makes it."""
    env = {"KERNLOCK_LOCKFILE": str(lockfile), "KERNLOCK_MODE": "strict", "KERNELS_CACHE": tiny.env["HF_HUB_CACHE"]}
    binding = runbind.bind(env, command, site=_site(python))
    assert binding is not None
    return binding


@pytest.mark.slow
def test_another_hosts_binding_binds_while_its_heartbeat_is_fresh(tiny: LockedProject, moved, python, tmp_path):
    """A run on another node that shares the environment: its binding binds while the run touches it (heartbeat),
    and nothing once it has not for runs.STALE_AFTER seconds (a run there that was killed)."""
    from kernlock.runtime import runs

    server, head = moved
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    binding = _bind_by_hand(tiny, python, tiny.project / "kernels.lock", ("srun", "--export=NONE"))
    try:
        record = {**(runbind.read_owner(binding.pth) or {}), "host": "other-node", "pid": 1, "start": "1"}
        binding.pth.write_text(f"import _kernlock_run\n{runs.OWNER_PREFIX}{record!r}\n")
        _assert_locked(tiny, _plain_rank(python, tmp_path, server.url, script), head)
        old = binding.pth.stat().st_mtime - runs.STALE_AFTER - 60
        os.utime(binding.pth, (old, old))
        stale = _plain_rank(python, tmp_path, server.url, script)
        assert stale["loaded"][TINY_ACTIVATION]["commit"] == head and stale["lockfile"] is None
    finally:
        binding.remove()


def _one_line(done: subprocess.CompletedProcess, *parts: str) -> str:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("kernlock: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr and all(part in lines[0] for part in parts), lines[0]
    return lines[0]


def test_two_runs_of_different_locks_in_one_environment_do_not_mix(tiny: LockedProject, moved, python, tmp_path):
    """Another run binds the environment to another lock: a CMD that clears the environment is refused before it
    starts (and so is any CMD while that run's does); otherwise a process that got no environment, seeing both,
    stops at its first kernel import with one line; never a load of either lock by guess."""
    server, _head = moved
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    other = tmp_path / "other" / "kernels.lock"
    other.parent.mkdir()
    shutil.copy(tiny.project / "kernels.lock", other)
    rank = _env_i(python, tmp_path, tmp_path / "home0", server.url, str(script))
    binding = _bind_by_hand(tiny, python, other, ("python",))
    try:
        refused = _kernlock(tiny, python, tmp_path, *rank)
        _one_line(refused, "another `kernlock run` binds", str(other), "`env -i` starts this run's", "Wait for it")
        assert "started" not in refused.stdout
        launcher = tmp_path / "ranks.sh"
        launcher.write_text(f"exec {' '.join(rank)}\n")
        mixed = _kernlock(tiny, python, tmp_path, "sh", str(launcher))
        line = _one_line(mixed, "error: kernlock run (", "2 `kernlock run`s in progress", str(other), "one at a time")
        assert str(tiny.project / "kernels.lock") in line and mixed.stdout == "started\n"
    finally:
        binding.remove()
    binding = _bind_by_hand(tiny, python, other, ("pdsh", "-w", "node1"))
    try:
        refused = _kernlock(tiny, python, tmp_path, "sh", str(launcher))
        _one_line(refused, "another `kernlock run` binds", "`pdsh` starts that run's")
        assert refused.stdout == ""
    finally:
        binding.remove()
    assert _bindings(python) == []


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [*LAUNCHERS, "python (passes the environment)"])
def test_where_the_environment_cannot_be_bound_a_clearing_launcher_is_refused(
    tiny: LockedProject, moved, python: Path, tmp_path, launcher
):
    """site-packages read-only for the user: `kernlock run -- <a launcher that clears the environment>` stops
    before anything starts, with one line naming `kernlock hook install`; a CMD that passes the environment on
    runs as before (its ranks get it). With the hook installed for the same lock, the clearing launcher runs."""
    server, head = moved
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    if launcher in LAUNCHERS:
        [cmd, *_] = _rank_commands(launcher, python, tmp_path, server.url, script)
    else:
        cmd = ["python", str(script)]
    site = _site(python)
    # root writes where the mode bits say no: run kernlock as root without that power (CAP_DAC_OVERRIDE)
    as_user = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search") if os.geteuid() == 0 else ()
    site.chmod(0o555)
    try:
        done = _kernlock(tiny, python, tmp_path, *cmd, hub=server.url, prefix=as_user)
    finally:
        site.chmod(0o755)
    if launcher not in LAUNCHERS:
        assert done.returncode == 0, done.stderr[-3000:]
        _assert_locked(tiny, _reports(done)[0], head)
        return
    lock = tiny.project / "kernels.lock"
    _one_line(done, f"cannot bind {site}", "Permission denied", f"`kernlock hook install --lockfile {lock}`")
    assert done.stdout == "" and _bindings(python) == []
    hooked = subprocess.run([str(python), "-m", "kernlock", "hook", "install", "--lockfile", str(lock)],
                            env=tiny.env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert hooked.returncode == 0, hooked.stderr
    site.chmod(0o555)
    try:
        done = _kernlock(tiny, python, tmp_path, *cmd, hub=server.url, prefix=as_user)
    finally:
        site.chmod(0o755)
    assert done.returncode == 0, done.stderr[-3000:]
    for report in _reports(done):
        _assert_locked(tiny, report, head)


TERMINATED = """
import os, signal, time
def stop(*_):
    print("CMD got SIGTERM", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
signal.signal(signal.SIGTERM, stop)
print("up", flush=True)
time.sleep(300)
"""


def test_kernlock_run_ends_as_cmd_ends_and_passes_signals_on(tiny: LockedProject, python: Path, tmp_path):
    """kernlock outlives CMD now (to remove the binding), and behaves as CMD: CMD's exit status is its own; a
    SIGTERM sent to kernlock reaches CMD, and kernlock then ends killed by SIGTERM, as CMD did."""
    done = _kernlock(tiny, python, tmp_path, *_env_i(python, tmp_path, tmp_path / "h", "", "-c", "exit(3)"))
    assert done.returncode == 3 and _bindings(python) == [], done.stderr
    argv = [str(python), "-m", "kernlock", "run", "-q", "--project", str(tiny.project), "--"]
    env = {**tiny.env, "PATH": _path(python, tmp_path)}
    cmd = _env_i(python, tmp_path, tmp_path / "h", "", "-c", TERMINATED)
    run = subprocess.Popen([*argv, *cmd], env=env, stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None and run.stdout.readline() == "up\n" and len(_bindings(python)) == 1
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=60)
    assert out == "CMD got SIGTERM\n" and run.returncode == -signal.SIGTERM
    assert _bindings(python) == []


def test_run_record_hears_ranks_that_get_no_environment(tiny: LockedProject, python: Path, tmp_path):
    """`kernlock run --record` binds the environment too: an `env -i` rank's request is recorded."""
    load = f"import kernels; kernels.get_kernel('{TINY_ACTIVATION}', version=1)"
    env = {**tiny.env, "PATH": _path(python, tmp_path)}
    argv = [str(python), "-m", "kernlock", "run", "--record", "--dry-run", "--project", str(tiny.project), "--"]
    cmd = _env_i(python, tmp_path, tmp_path / "h", "", "-c", load)
    done = subprocess.run([*argv, *cmd], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "kernlock:" not in done.stderr, done.stderr
    assert "1 Hub kernel request recorded by 1 process" in done.stdout, done.stdout
    assert f"{TINY_ACTIVATION}  v1     get_kernel  yes     1" in done.stdout, done.stdout
    assert _bindings(python) == []


@pytest.mark.parametrize(
    ("command", "env", "clears"),
    [
        (["env", "-i", "PATH=/bin", "python"], {}, "env -i"),
        (["/usr/bin/env", "-vi", "python"], {}, "env -i"),
        (["env", "-", "python"], {}, "env -i"),
        (["env", "-u", "i", "python"], {}, None),
        (["env", "PATH=/bin", "python"], {}, None),
        (["srun", "--export=NONE", "-n", "8", "python"], {}, "srun --export=NONE"),
        (["srun", "-n", "8", "--export", "HOME,PATH", "python"], {}, "srun --export=HOME,PATH"),
        (["srun", "--export=ALL,X=1", "python"], {}, None),
        (["srun", "python"], {"SLURM_EXPORT_ENV": "NONE"}, "srun --export=NONE"),
        (["srun", "python"], {}, None),
        (["pdsh", "-w", "node[1-2]", "python"], {}, "pdsh"),
        (["ssh", "node1", "python"], {}, "ssh"),
        (["mpirun", "-np", "2", "python"], {}, "mpirun"),
        (["torchrun", "--nproc-per-node", "2", "train.py"], {}, None),
        (["deepspeed", "--hostfile", "hosts", "train.py"], {}, None),  # forwards PYTHON*: the sitecustomize
    ],
)
def test_which_launchers_are_known_to_clear_the_environment(command, env, clears):
    from kernlock.commands.launchers import clears_environment

    assert clears_environment(command, env) == clears
