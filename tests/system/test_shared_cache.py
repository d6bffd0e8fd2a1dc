"""Two Unix users of one group share one kernel cache (issue 24): with umask 022 or 002 and a setgid team folder,
the second user syncs, verifies and loads what the first downloaded, and downloads what is missing into the folders
the first made; a cache the user may only read still serves `sync --offline`, `verify` and loads.

The users are real (made with useradd, once per session; the suite runs as root, else these tests are skipped),
each with their own HOME and kernlock cache. They run a copy of this interpreter (users.portable_python) in a
folder every user can reach: the clone's .venv and the base interpreter may lie in a home folder only its owner may
enter (0700, 0750), and no test opens such a folder to others.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from envs import clean_env
from processes import CHILD_PRELUDE
from projects import CPU_ENV, write_pyproject
from users import portable_python, reachable_by_others

from kernlock import api
from kernlock.lock import file as lockfile
from kernlock.sync import engine as syncing
from kernlock.testing import HubServer

ACTIVATION = "kernels-community/activation"
PAGED = "kernels-community/paged-attention"  # depends on activation v1
GROUP = "kltest-share"
USERS = ("kltest-ann", "kltest-ben")

pytestmark = [
    pytest.mark.root,
    pytest.mark.subprocess,
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root (useradd)"),
]


def _ensure_users() -> None:
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", GROUP], check=True)
    for user in USERS:
        try:
            pwd.getpwnam(user)
        except KeyError:
            subprocess.run(["useradd", "--no-create-home", "-g", GROUP, user], check=True)


@pytest.fixture(scope="session")
def shared() -> Iterator[Path]:
    """A folder of this session that every user can reach (pytest's own tmp_path is its owner's alone)."""
    places = [Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp")]
    place = next((p for p in places if p.is_dir() and reachable_by_others(p)), None)
    if place is None:
        pytest.skip(f"no folder every user can reach to run them in (tried {', '.join(map(str, places))})")
    folder = Path(tempfile.mkdtemp(prefix="kernlock-shared-", dir=place))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Users:
    names: tuple[str, ...]
    python: str  # the interpreter they run (portable_python)
    env: dict[str, str]  # what its environment needs


@pytest.fixture(scope="session")
def users(shared: Path) -> Users:
    if shutil.which("useradd") is None:
        pytest.skip("no useradd")
    _ensure_users()
    python, env = portable_python(shared / "python")
    probe = subprocess.run(
        [str(python), "-c", "import kernlock.cli.app, kernels, torch"], env=clean_env(**env), cwd=shared,
        user=USERS[0], group=GROUP, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"]
        pytest.skip(f"{USERS[0]} cannot run a copy of this interpreter in {shared}: {lines[-1]}")
    return Users(USERS, str(python), env)


@pytest.fixture
def base(users: Users, shared: Path) -> Iterator[Path]:
    """A folder of this test that every user can reach."""
    folder = Path(tempfile.mkdtemp(prefix="test-", dir=shared))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _home(base: Path, user: str) -> Path:
    home = base / f"home-{user}"
    if not home.exists():
        home.mkdir()
        shutil.chown(home, user, GROUP)
        home.chmod(0o700)
    return home


def _as(users: Users, user: str, args: list[str], base: Path, env: dict[str, str], umask: int, cwd: Path):
    """Run ``python ARGS`` as ``user`` (the interpreter the users run)."""
    home = _home(base, user)
    env = {
        **env,
        **users.env,
        "HOME": str(home),
        "TMPDIR": str(home),
        "KERNLOCK_CACHE": str(home / ".cache" / "kernlock"),
    }
    root = env.get("KERNLOCK_SIGSTORE_TRUSTED_ROOT")
    if root:  # the test sigstore instance's root lies in this (root) process's own tmp folder: give a copy all may read
        shared = base / "trusted_root.json"
        if not shared.exists():
            shutil.copyfile(root, shared)
            shared.chmod(0o644)
        env["KERNLOCK_SIGSTORE_TRUSTED_ROOT"] = str(shared)
    return subprocess.run(
        [users.python, *args], env=env, cwd=cwd, user=user, group=GROUP, extra_groups=[GROUP], umask=umask,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


LOAD = CHILD_PRELUDE + textwrap.dedent(
    """
    import kernlock.activate
    import kernels
    module = kernels.get_kernel(sys.argv[1], version=1)
    print("REPORT " + json.dumps({"identity": module.KERNEL_IDENTITY, "connects": CONNECTS}))
    """
)


def _project(base: Path, name: str, kernels: str, hub: HubServer) -> Path:
    """A project every user can read, locked by this (root) process against the running Hub."""
    project = base / name
    project.mkdir()
    write_pyproject(project, kernels, [CPU_ENV])
    api.lock(project)
    for path in [project, *project.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return project


def _kernlock(*args: str) -> list[str]:
    return ["-m", "kernlock", *args]


@pytest.mark.parametrize("umask", [0o022, 0o002], ids=["umask022", "umask002"])
def test_two_users_share_a_setgid_cache(users: Users, base: Path, hub: HubServer, user_env: dict[str, str], umask: int):
    ann, ben = users.names
    cache = base / "team-cache"
    cache.mkdir()
    shutil.chown(cache, "root", GROUP)
    cache.chmod(0o2775)
    first = _project(base, "first", f'"{ACTIVATION}" = "v1"\n', hub)
    second = _project(base, "second", f'"{PAGED}" = "v1"\n', hub)  # activation v1 again, and paged-attention
    env = clean_env(**hub.env(), KERNELS_CACHE=str(cache))

    done = _as(users, ann, _kernlock("sync", "--project", str(first)), base, env, umask, first)
    assert done.returncode == 0, done.stderr
    downloads = hub.log.count(method="GET", contains="/resolve/")
    for folder in [p for p in cache.rglob("*") if p.is_dir() and not p.is_symlink()]:
        mode = folder.stat().st_mode
        assert mode & stat.S_IWGRP and mode & stat.S_ISGID, f"{folder} is {oct(mode)}"
    for lock in cache.glob(".locks/**/*.lock"):
        assert lock.stat().st_mode & stat.S_IWGRP, f"{lock} is {oct(lock.stat().st_mode)}"

    again = _as(users, ben, _kernlock("sync", "--project", str(first)), base, env, umask, first)
    assert again.returncode == 0, again.stderr
    assert "0 downloaded" in again.stdout
    assert hub.log.count(method="GET", contains="/resolve/") == downloads, "nothing downloaded twice"
    verified = _as(users, ben, _kernlock("verify", "--project", str(first)), base, env, umask, first)
    assert verified.returncode == 0, verified.stderr
    loaded = _as(users, ben, ["-c", LOAD, ACTIVATION], base, env, umask, first)
    assert loaded.returncode == 0, loaded.stderr
    report = json.loads(loaded.stdout.split("REPORT ", 1)[1])
    assert report["identity"]["repo"] == ACTIVATION and report["connects"] == []

    more = _as(users, ben, _kernlock("sync", "--project", str(second)), base, env, umask, second)
    assert more.returncode == 0, more.stderr
    lock = lockfile.read(second / "kernels.lock")
    assert syncing.verify(lock, [CPU_ENV], cache=cache).problems == ()
    owners = {pwd.getpwuid(p.stat().st_uid).pw_name for p in cache.glob("kernels--*/blobs/*")}
    assert owners == {ann, ben}, "ben downloaded only what ann had not"


def test_a_cache_the_user_may_only_read_still_serves(
    users: Users, base: Path, hub: HubServer, user_env: dict[str, str]
):
    ann, ben = users.names
    cache = base / "ann-cache"
    cache.mkdir()
    shutil.chown(cache, ann, GROUP)
    cache.chmod(0o755)
    project = _project(base, "project", f'"{ACTIVATION}" = "v1"\n', hub)
    env = clean_env(**hub.env(), KERNELS_CACHE=str(cache))
    assert _as(users, ann, _kernlock("sync", "--project", str(project)), base, env, 0o022, project).returncode == 0
    offline = {**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    for args in (_kernlock("sync", "--offline"), _kernlock("verify"), ["-c", LOAD, ACTIVATION]):
        done = _as(users, ben, args, base, offline, 0o022, project)
        assert done.returncode == 0, (args[-1], done.stderr)
    assert not [p for p in cache.rglob("*") if p.stat(follow_symlinks=False).st_uid != pwd.getpwnam(ann).pw_uid]
