"""Shared fixtures: one local Hub over the realistic catalog per test session, isolated caches per test; the check
behind the ``subprocess`` marker and the one that keeps ``tests/unit`` units.

Folders, by kind (README, Developing):

- ``tests/unit``: no Hub, no process: the readers, writers, parsers, the docs and the code's health. Checked: a test
  there that uses the session Hub (its ``catalog``) or carries the ``subprocess`` or ``root`` marker fails.
- ``tests/functional``: kernlock against the session Hub, in this process and through its command line.
- ``tests/system``: what spans processes, users and machines: launchers, ranks, fleets, other Unix users, installs.
- ``tests/compat``: the compatibility matrix (scripts/matrix.sh runs it in each set).

The session's own home (tests/hygiene.py, imported first): this process and every process it starts (pytest-xdist
workers, every child of a test) have a HOME, XDG folders and caches in a temporary folder, not the developer's; the
run fails after the session when something appeared, changed or went in the real home's kernlock, Hub and other
caches or among its dotfiles all the same, naming each path.

Markers (pyproject.toml registers them; README, Developing, says how to pick tests by them):

- ``root``: needs root and other Unix users (useradd, a folder given to another uid); skipped as anyone else.
- ``subprocess``: the test or a fixture it uses starts a process other than git: the kernlock command line, a Python
  child, a launcher, a server process. git does not count: the test Hub and the fixture repositories run it all
  the time. Checked as the tests run: a test without the marker that starts such a process (multiprocessing's spawn
  and forkserver children included) fails at teardown, naming it, so ``-m "not subprocess"`` starts none.
- ``slow``: takes more than about 5 s on a 2-core machine (with the fixtures it alone uses).
- ``system``: a test of ``tests/system`` (given by its folder, below): ``-m system`` runs the launchers, ranks,
  clusters (Ray), fleets, other users and installs, ``-m "not system"`` leaves them out.
- ``binds``: starts `kernlock run` with this interpreter. While that run lasts it binds this Python environment,
  every process of it (docs/clusters.md): a test running beside it in another pytest-xdist worker would load under
  its lock. scripts/test.sh runs these tests after the others, one at a time. Checked as the tests run: a test that
  starts such a run without the marker fails at teardown.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import hygiene  # first: the session's own home, before anything reads HOME or a cache variable
import pytest
from envs import SCRUBBED, test_trusted_root, user_env_for
from installs import ROOT, build_wheel, wheel_venv
from processes import ProcessLog

from kernlock.testing import Catalog, HubServer, build_catalog

PROCESSES = ProcessLog()  # what the running test started (processes.ProcessLog: git left out)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of tests/system ``system``: its folder is its kind."""
    system = Path(__file__).resolve().parent / "system"
    for item in items:
        if system in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.system)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(hygiene, "hygiene")  # its check after the session


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    PROCESSES.names = []  # from the setup of the test's first fixture on
    PROCESSES.binds = False
    try:
        return (yield)
    finally:
        PROCESSES.names = None


@pytest.fixture(autouse=True)
def _processes_need_the_subprocess_marker(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test without the ``subprocess`` marker starts no process but git (its fixtures included)."""
    yield
    if PROCESSES.names and request.node.get_closest_marker("subprocess") is None:
        names = ", ".join(sorted(set(PROCESSES.names)))
        pytest.fail(
            f"started {names} without the subprocess marker: mark the test (or its module) "
            "@pytest.mark.subprocess (tests/conftest.py says which tests get it)",
            pytrace=False,
        )
    if PROCESSES.binds and request.node.get_closest_marker("binds") is None:
        pytest.fail(
            "started `kernlock run` with this interpreter without the binds marker: mark the test "
            "@pytest.mark.binds (tests/conftest.py says why)",
            pytrace=False,
        )


@pytest.fixture
def process_log() -> ProcessLog:
    """The log behind the ``subprocess`` marker, for the tests of the log itself (ProcessLog.refusing)."""
    return PROCESSES


UNIT = Path(__file__).resolve().parent / "unit"


@pytest.fixture(autouse=True)
def _units_stay_units(request: pytest.FixtureRequest) -> None:
    """A test in tests/unit uses no Hub and starts no process (it belongs in tests/functional or tests/system)."""
    if not request.node.path.is_relative_to(UNIT):
        return
    marked = [name for name in ("subprocess", "root") if request.node.get_closest_marker(name)]
    if marked or "catalog" in request.fixturenames:
        what = f"the {marked[0]} marker" if marked else "the session Hub"
        pytest.fail(f"a unit test with {what}: move it to tests/functional or tests/system", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _trusted_root() -> Iterator[None]:
    """This process trusts the test sigstore instance too (in-process locks and syncs), as clean_env's do."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNLOCK_SIGSTORE_TRUSTED_ROOT", test_trusted_root())
        yield


@pytest.fixture(scope="session")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    """The realistic kernels-community catalog (read-only: tests that move branches make their own repos)."""
    return build_catalog(tmp_path_factory.mktemp("hub"))


@pytest.fixture(scope="session")
def hub_server(catalog: Catalog) -> Iterator[HubServer]:
    with HubServer(catalog.root) as server:
        yield server


@pytest.fixture
def hub(hub_server: HubServer) -> Iterator[HubServer]:
    """The session's Hub with an empty request log and no faults."""
    hub_server.log.clear()
    hub_server.faults.clear()
    yield hub_server
    hub_server.faults.clear()


@pytest.fixture
def user_env(tmp_path: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A user's environment pointed at the local Hub with fresh caches; also applied to this process."""
    env = user_env_for(tmp_path, hub)
    for key in SCRUBBED:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty project directory."""
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside every cache and project: hostile paths in tests point into it (see ``outside``)."""
    root = tmp_path_factory.mktemp("sentinel")
    (root / "keep").mkdir()
    (root / "keep" / "file.txt").write_text("must stay as it is\n")
    return root


def _tree(root: Path) -> list[tuple[str, int, bytes]]:
    return sorted(
        (str(p.relative_to(root)), p.lstat().st_mode, p.read_bytes() if p.is_file() else b"") for p in root.rglob("*")
    )


@pytest.fixture(autouse=True)
def _sentinel_untouched(sentinel: Path) -> Iterator[None]:
    """Every test: nothing kernlock did may create, change or remove anything in the sentinel tree."""
    before = _tree(sentinel)
    yield
    assert _tree(sentinel) == before, "kernlock wrote outside its cache or project (into the sentinel tree)"


@pytest.fixture
def outside(sentinel: Path) -> Path:
    """A path in the sentinel tree for hostile input to name (an absolute path, the target of a symlink)."""
    return sentinel / "outside"


@pytest.fixture(scope="session")
def kernlock_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kernlock wheel of this checkout, built once per session (`uv build`)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def wheel_installed(tmp_path_factory: pytest.TempPathFactory, kernlock_wheel: Path) -> Callable[[str], Path]:
    """``wheel_installed("3.12")``: the bin folder of a fresh environment of that Python with the wheel installed and
    no torch (a `uv tool install`, a laptop), made once per session per Python."""
    sys.path.insert(0, str(ROOT / "tests" / "compat"))
    from compat_matrix import interpreter  # $PYENV_ROOT/versions/<version>.*, as scripts/matrix.sh finds them

    made: dict[str, Path] = {}

    def installed(version: str) -> Path:
        if version not in made:
            folder = tmp_path_factory.mktemp(f"py{version}") / "venv"
            made[version] = wheel_venv(folder, interpreter(version), kernlock_wheel)
        return made[version]

    return installed
