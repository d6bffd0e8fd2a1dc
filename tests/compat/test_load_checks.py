"""The load-time checks of today's loaders and kernlock's, in whichever matrix set is installed.

kernels 0.18 and 0.19 check every load themselves: the build's files against the digest in its metadata.json
(receipts kept in the Hugging Face cache) and, where ``sigstore`` is importable (kernlock depends on it), its
signature against sigstore's *production* trust root over the network. Under activation:

* a locked, signed build loads with ``HF_HUB_OFFLINE=1`` and no network at all, where plain kernels 0.18+ dies
  trying to refresh sigstore's trust metadata (kernlock verified that signature at lock time against the project's
  root and checked the files against the lock before the load: its check stands in);
* a build whose files no longer match is refused by kernlock and, without kernlock, by kernels' own digest check;
* kernels' own lock (``load_kernel``) naming another commit is refused: kernels 0.18 writes commits as ``Oid``, and
  kernlock 78e6b59 read such a lock as "version=1" and loaded the locked build without a word;
* ``UNSTABLE_KERNELS_ALL_LATEST`` (kernels 0.19: "overriding ... any lockfile pin") is refused in strict mode and
  said in warn mode;
* the loaded commits kernlock gathers across ranks are text, picklable (an ``Oid`` is neither sliceable nor
  picklable);
* torch imported before kernlock (every transformers program) does not matter (kernels 0.19 under 78e6b59:
  ``ModuleNotFoundError: No module named 'kernels.backends'``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from envs import user_env_for
from processes import HIDE_SIGSTORE
from projects import CPU_ENV, LockedProject, locked_offline, write_pyproject

from kernlock.runtime import loaders
from kernlock.testing import CPU_VARIANT, HubServer, create_kernel_repo

REPO = "kernels-community/checked"
GENERATION = loaders.probe().generation
#: kernels 0.18 on check the digest (and, with sigstore, the signature) of every load themselves.
CHECKS_AT_LOAD = GENERATION in ("kernels-0.18", "kernels-0.19")
RESOLVING = GENERATION in ("kernels-0.17", "kernels-0.18", "kernels-0.19")


def _project(base: Path) -> LockedProject:
    """A signed activation repo locked at v1 and synced into fresh caches; the Hub is stopped on return."""
    root = base / "hub"
    create_kernel_repo(root, REPO, {"v1": [CPU_VARIANT], "v2": [CPU_VARIANT]}, kind="activation", signed=True)
    project = base / "project"
    project.mkdir()
    write_pyproject(project, f'"{REPO}" = "v1"\n', environments=[CPU_ENV])
    return locked_offline(root, project, user_env_for(base))


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedProject]:
    yield _project(tmp_path_factory.mktemp("checked"))


def _variant_file(locked: LockedProject, name: str) -> Path:
    entry = locked.entry(REPO)
    found = list(Path(locked.env["HF_HUB_CACHE"]).glob(f"*/snapshots/{entry.commit}/build/{CPU_VARIANT}/{name}"))
    assert len(found) == 1, found
    return found[0]


LOAD_BY_COMMIT = """
import kernels
try:
    module = kernels.get_kernel("{repo}", revision="{commit}")
    result = {{"identity": module.KERNEL_IDENTITY}}
except Exception as err:
    result = {{"error": [type(err).__name__, str(err)[:500]]}}
report(**result)
"""


@pytest.mark.subprocess
def test_a_signed_locked_build_loads_offline_with_sigstore_installed(checked: LockedProject) -> None:
    commit = checked.entry(REPO).commit
    assert _variant_file(checked, "metadata.json.sigstore").is_file()  # a signed build
    offline = {"HF_HUB_OFFLINE": "1"}
    child = checked.run(
        "import torch\n" + LOAD_BY_COMMIT.format(repo=REPO, commit=commit), env=offline
    )  # torch first, as through transformers
    report = checked.assert_locked(child, REPO)
    assert report["identity"] == checked.identity(REPO), report
    assert "Traceback" not in child.stderr
    if not CHECKS_AT_LOAD:
        return
    plain = checked.run(LOAD_BY_COMMIT.format(repo=REPO, commit=commit), env=offline, activate=False)
    name, message = plain.report["error"]  # plain kernels: sigstore's production trust root, over the network
    assert "TUF" in name + message, plain.report


@pytest.mark.subprocess
def test_a_build_whose_files_changed_is_refused_by_kernlock_and_by_kernels(tmp_path: Path) -> None:
    locked = _project(tmp_path)  # fresh caches: no receipt of kernels' yet
    blob = _variant_file(locked, "__init__.py").resolve()
    blob.write_text(blob.read_text().replace("KERNEL_IDENTITY", "KERNEL_IDENTITY_CHANGED", 1))
    commit = locked.entry(REPO).commit
    child = locked.run(LOAD_BY_COMMIT.format(repo=REPO, commit=commit), env={"HF_HUB_OFFLINE": "1"})
    name, message = child.report["error"]
    assert name == "IntegrityError" and "__init__.py" in message and "kernlock sync" in message, child.report
    assert child.report["loaded"] == {}
    if CHECKS_AT_LOAD:  # with sigstore hidden, plain kernels' own digest check is what refuses it
        hidden = HIDE_SIGSTORE
        plain = locked.run(
            hidden + LOAD_BY_COMMIT.format(repo=REPO, commit=commit), env={"HF_HUB_OFFLINE": "1"}, activate=False
        )
        name, message = plain.report["error"]
        assert name == "RuntimeError" and "do not match the digest" in message, plain.report


@pytest.mark.subprocess
@pytest.mark.skipif(not RESOLVING, reason="kernels 0.15/0.16 read another lock format (tests/functional)")
def test_kernels_own_lock_naming_another_commit_is_refused(checked: LockedProject, tmp_path: Path) -> None:
    theirs = tmp_path / "kernels.lock.json"
    other = "0" * 40
    theirs.write_text(json.dumps([{"dependency": {"repo-id": REPO, "version": 1}, "lock": {"commit": other}}]))
    child = checked.run(
        f"""
        import kernels
        from pathlib import Path
        try:
            kernels.load_kernel("{REPO}", lockfile=Path(sys.argv[1]))
            result = {{}}
        except Exception as err:
            result = {{"error": [type(err).__name__, str(err)]}}
        report(**result)
        """,
        args=[str(theirs)],
    )
    name, message = child.report["error"]
    assert name == "ActivationError", child.report
    assert f"{REPO}@{other} is requested, but kernels.lock pins {REPO} to v1" in message
    assert child.report["loaded"] == {} and child.report["connects"] == []


@pytest.mark.subprocess
@pytest.mark.skipif(GENERATION != "kernels-0.19", reason="UNSTABLE_KERNELS_ALL_LATEST arrived in kernels 0.19")
def test_kernels_all_latest_switch_is_refused_in_strict_mode_and_said_in_warn_mode(checked: LockedProject) -> None:
    body = f"""
        import kernels
        try:
            kernels.get_kernel("{REPO}", version=1)
            result = {{}}
        except Exception as err:
            result = {{"error": [type(err).__name__, str(err)]}}
        report(**result)
        """
    latest = {"UNSTABLE_KERNELS_ALL_LATEST": "1", "HF_HUB_OFFLINE": "1"}
    strict = checked.run(body, env=latest)
    name, message = strict.report["error"]
    assert name == "ActivationError" and "UNSTABLE_KERNELS_ALL_LATEST is set" in message and "unset it" in message
    assert strict.report["loaded"] == {}
    warn = checked.run(body, env={**latest, "KERNLOCK_MODE": "warn"})
    said = [line for line in warn.stderr.splitlines() if "UNSTABLE_KERNELS_ALL_LATEST is set" in line]
    assert len(said) == 1 and "Loading the newest version, unlocked" in said[0], warn.stderr[-2000:]


@pytest.mark.subprocess
def test_the_loaded_commits_kernlock_gathers_across_ranks_are_text(checked: LockedProject) -> None:
    child = checked.run(
        f"""
        import pickle
        import kernels
        from kernlock.distributed import loaded_commits
        kernels.get_kernel("{REPO}", version=1)
        commits = pickle.loads(pickle.dumps(loaded_commits()))
        report(commits=commits)
        """
    )
    checked.assert_locked(child, REPO)
    assert child.report["commits"] == {REPO: checked.entry(REPO).commit}


@pytest.mark.subprocess
@pytest.mark.skipif(not CHECKS_AT_LOAD, reason="kernels 0.18 on check signatures at load")
def test_an_unlocked_build_kernels_cannot_check_offline_ends_in_one_line(tmp_path: Path) -> None:
    """warn mode loads an unlocked repo as kernels would; kernels 0.18+ then checks its signature against sigstore's
    production root over the network, which is not there (an air-gapped cluster): one line naming the fix, as often
    as it is tried, where b8ce183 ended in a ``TUFError`` traceback."""
    locked = _project(tmp_path)
    unlocked = "kernels-community/unlocked-signed"
    create_kernel_repo(locked.root, unlocked, {"v1": [CPU_VARIANT]}, kind="activation", signed=True)
    body = f'import kernels\nkernels.get_kernel("{unlocked}", version=1)\nreport()\n'
    with HubServer(locked.root) as server:
        env = {**server.env(), "KERNLOCK_MODE": "warn"}
        for _ in range(2):  # the retry after a refusal is refused the same way
            child = locked.run(body, env=env)
            line = child.error_line()
            assert child.returncode == 1 and line.startswith("kernlock: error:"), child.stderr[-3000:]
            assert "Traceback" not in child.stderr, child.stderr[-3000:]
            assert f"could not check the signature of {unlocked}" in line and "sigstore" in line
            assert f"kernlock add {unlocked}" in line and "kernlock sync" in line, line
