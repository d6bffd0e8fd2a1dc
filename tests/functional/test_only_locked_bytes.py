"""Only bytes the lock names execute, and every cache path stays under the cache ("hostile input never escapes").

A synced variant folder holds exactly the locked files plus kernlock's empty ``__pycache__`` FILE in every folder
that holds a locked ``.py`` file, so CPython can neither read nor write bytecode there. Anything else - a planted
unchecked-hash ``.pyc``, an extension module or package that shadows a locked module, a symlink that does not
point at its blob - is refused at load, reported by `kernlock verify` and removed by `kernlock sync`.

Real kernels/huggingface_hub/torch against the local Hub; every load runs in a fresh process through
``kernels.get_kernel`` with ``import kernlock.activate``, with bytecode writing enabled.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import py_compile
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli import run_cli
from projects import CPU_ENV, receipt_file, write_pyproject

from kernlock import api
from kernlock.errors import IntegrityError, NotSyncedError
from kernlock.lock.model import Lock, LockedFile, LockedKernel, LockedVariant
from kernlock.sync import cache as caches
from kernlock.sync import engine as syncing
from kernlock.sync.integrity import FileState
from kernlock.testing import Catalog, HubServer, read_identity

ACTIVATION = "kernels-community/activation"
TAG = sys.implementation.cache_tag  # cpython-311
# Run by a planted file: proves that it executed (it never may).
EVIL = 'import os\nprint("PWNED", flush=True)\nopen(os.environ["KL_MARKER"], "w").close()\n'
LOAD = """\
import kernlock.activate
import json, sys, kernels
assert not sys.flags.dont_write_bytecode and not sys.dont_write_bytecode  # Python would write bytecode
kernel = kernels.get_kernel("kernels-community/activation", version=1)
print("IDENTITY " + json.dumps(kernel.KERNEL_IDENTITY), flush=True)
"""


@dataclass
class Project:
    project: Path
    lock: Lock
    entry: LockedKernel
    variant: LockedVariant
    cache: Path
    env: dict[str, str]  # the user's environment: local Hub, this cache, bytecode writing on
    identity: dict[str, Any]  # KERNEL_IDENTITY of the locked build, read from git
    pwned: Path  # what a planted file writes when it runs

    @property
    def root(self) -> Path:
        return syncing.variant_path(self.entry, self.variant, self.cache)

    def load(self, *python_args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *python_args, "-c", LOAD],
            cwd=self.project,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return run_cli(*args, "--project", str(self.project), env=self.env)

    def assert_loaded(self, child: subprocess.CompletedProcess) -> None:
        assert child.returncode == 0, child.stderr[-3000:]
        line = next(line for line in child.stdout.splitlines() if line.startswith("IDENTITY "))
        assert json.loads(line.removeprefix("IDENTITY ")) == self.identity
        assert "PWNED" not in child.stdout and not self.pwned.exists()

    def assert_refused(self, child: subprocess.CompletedProcess, *names: str) -> str:
        """The load failed with an IntegrityError naming ``names`` and `kernlock sync`; nothing planted ran."""
        assert "PWNED" not in child.stdout and not self.pwned.exists(), child.stdout[-2000:]
        lines = [line for line in child.stderr.splitlines() if line.strip()]
        line = lines[-1] if lines else ""
        assert child.returncode != 0 and line.startswith("kernlock: error:"), child.stderr[-3000:]
        for name in (*names, "`kernlock sync`"):
            assert name in line, (name, line)
        return line


@pytest.fixture
def locked(user_env: dict[str, str], hub: HubServer, project: Path, catalog: Catalog, tmp_path: Path) -> Project:
    """A project that locks activation v1 for this machine; nothing synced yet."""
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    lock = api.lock(project).lock
    entry = lock.entry_for(ACTIVATION, CPU_ENV)
    assert entry is not None
    variant = entry.variant_for(CPU_ENV)
    assert variant is not None
    pwned = tmp_path / "pwned"
    env = {**user_env, "KL_MARKER": str(pwned)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    identity = read_identity(catalog.root, ACTIVATION, entry.commit, variant.name)
    return Project(project, lock, entry, variant, Path(user_env["HF_HUB_CACHE"]), env, identity, pwned)


@pytest.fixture
def synced(locked: Project) -> Project:
    """The same project, synced."""
    api.sync(locked.project, progress=False)
    return locked


def _is_marker(path: Path) -> bool:
    return path.is_file() and not path.is_symlink() and path.stat().st_size == 0


def _pyc_anywhere(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.name.endswith(".pyc") or (p.name == "__pycache__" and p.is_dir())]


def _repair_and_load(p: Project, *removed: str) -> None:
    """`kernlock sync` removes what the lock does not name and rewrites the marker; the next load works."""
    repaired = p.cli("sync")
    assert repaired.returncode == 0, repaired.stderr
    lines = [line for line in repaired.stdout.splitlines() if line.startswith("  removed from ")]
    for name in removed:
        assert any(name in line and line.endswith("(not in kernels.lock)") for line in lines), repaired.stdout
    assert _is_marker(p.root / "__pycache__")
    assert sorted(os.listdir(p.root)) == sorted([f.path for f in p.variant.files] + ["__pycache__"])
    checked = p.cli("verify")
    assert checked.returncode == 0, checked.stderr
    p.assert_loaded(p.load())


# -- (a) planted bytecode --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.subprocess
def test_planted_unchecked_hash_pyc_is_refused_reported_and_removed(synced: Project, tmp_path: Path):
    """An unchecked-hash .pyc is executed by CPython without looking at the source: with kernlock's marker
    replaced by a real __pycache__ folder it would run instead of the verified __init__.py."""
    p = synced
    marker = p.root / "__pycache__"
    marker.unlink(missing_ok=True)  # kernlock's marker file (checked by _repair_and_load) becomes a folder
    marker.mkdir()
    source = tmp_path / "evil.py"
    source.write_text(EVIL)
    planted = marker / f"__init__.{TAG}.pyc"
    py_compile.compile(
        str(source), cfile=str(planted), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    relative = f"__pycache__/__init__.{TAG}.pyc"

    for verify in ("receipt", "full"):
        line = p.assert_refused(p.load(KERNLOCK_VERIFY=verify), f"unexpected file build/{CPU_ENV}/{relative}")
        assert "not in kernels.lock" in line and "(never loaded)" in line
    assert planted.exists()  # a load never repairs behind the user's back

    assert not syncing.is_synced(p.entry, p.variant, p.cache)
    checked = p.cli("verify")
    assert checked.returncode == 1
    assert f"{ACTIVATION} {CPU_ENV} {relative}" in checked.stderr and "unexpected" in checked.stderr
    offline = p.cli("sync", "--offline")
    assert offline.returncode == 1 and relative in offline.stderr and "kernels.lock does not name" in offline.stderr

    _repair_and_load(p, "__pycache__")


# -- (b) files next to the locked ones -------------------------------------------------------------------------


def _extension_module(tmp_path: Path, name: str) -> bytes:
    """A real extension module ``name`` whose init runs EVIL (built with the C compiler when there is one), else
    bytes that the import system still prefers over ``name.py``."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return b"\x7fELF not really an extension module"
    c = tmp_path / f"{name}.c"
    statements = "".join(f"PyRun_SimpleString({json.dumps(line)});" for line in EVIL.splitlines())
    c.write_text(
        "#include <Python.h>\n"
        f'static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, NULL}};\n'
        f"PyMODINIT_FUNC PyInit_{name}(void) {{ {statements} return PyModule_Create(&def); }}\n"
    )
    out = tmp_path / f"{name}.so"
    include = sysconfig.get_paths()["include"]
    subprocess.run([compiler, "-shared", "-fPIC", f"-I{include}", str(c), "-o", str(out)], check=True)
    return out.read_bytes()


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("kind", ["extension", "package", "module", "symlink"])
def test_a_file_the_lock_does_not_name_is_refused_reported_and_removed(synced: Project, tmp_path: Path, kind: str):
    """``_ops.<abi>.so`` wins over the locked ``_ops.py`` (FileFinder prefers extension modules), and so does a
    package ``_ops/``; a stray module is refused too; a locked file must be a symlink to exactly its blob."""
    p = synced
    ops = "_ops.py"
    assert ops in {f.path for f in p.variant.files}
    if kind == "extension":
        name = f"_ops{importlib.machinery.EXTENSION_SUFFIXES[0]}"
        (p.root / name).write_bytes(_extension_module(tmp_path, "_ops"))
        names, removed = [f"build/{CPU_ENV}/{name}"], [name]
    elif kind == "package":
        (p.root / "_ops").mkdir()
        (p.root / "_ops" / "__init__.py").write_text(EVIL)
        names, removed = [f"build/{CPU_ENV}/_ops/__init__.py"], ["_ops"]
    elif kind == "module":
        (p.root / "sitecustomize.py").write_text(EVIL)
        names, removed = [f"build/{CPU_ENV}/sitecustomize.py"], ["sitecustomize.py"]
    else:  # the same bytes, but outside the blobs (and outside the cache): swappable after the check
        outside = tmp_path / "outside-_ops.py"
        shutil.copyfile(p.root / ops, outside)
        (p.root / ops).unlink()
        (p.root / ops).symlink_to(outside)
        names, removed = [ops, "not to its blob"], []

    for verify in ("receipt", "full"):
        p.assert_refused(p.load(KERNLOCK_VERIFY=verify), *names)
    checked = p.cli("verify")
    assert checked.returncode == 1 and (removed[0] if removed else ops) in checked.stderr, checked.stderr
    if kind == "symlink":
        with pytest.raises(IntegrityError, match="not to its blob"):
            syncing.check_variant(p.entry, p.variant, cache=p.cache)
    _repair_and_load(p, *removed)
    assert (p.root / ops).is_symlink() and (p.root / ops).resolve().parent.name == "blobs"


# -- (c) Python writes no bytecode into the cache ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.subprocess
def test_loads_write_no_bytecode_and_compile_from_source(locked: Project):
    """Not synced: the load fetches the locked files (ensure_variant) and writes the markers; then, with bytecode
    writing enabled, no load leaves a __pycache__ folder or a .pyc in the cache, and every load compiles the
    verified sources (CPython's "code object from" names the .py file, never a .pyc)."""
    p = locked
    first = p.load()  # online: the not-synced path downloads exactly the locked files
    p.assert_loaded(first)
    assert _pyc_anywhere(p.cache) == []
    assert _is_marker(p.root / "__pycache__")
    for _ in range(2):
        child = p.load("-v")
        p.assert_loaded(child)
        origins = [line for line in child.stderr.splitlines() if "code object from" in line and str(p.root) in line]
        assert {Path(line.split("code object from ")[1].strip("'")).name for line in origins} >= {
            "__init__.py",
            "_ops.py",
        }, origins
        assert not [line for line in origins if ".pyc" in line]
    assert _pyc_anywhere(p.cache) == []
    assert _is_marker(p.root / "__pycache__")
    assert syncing.is_synced(p.entry, p.variant, p.cache)


# -- (d) the receipt sees a rewrite whose mtime was put back -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.subprocess
def test_rewrite_with_restored_mtime_is_caught_by_the_receipt(synced: Project):
    p = synced
    assert syncing.is_synced(p.entry, p.variant, p.cache)
    blob = (p.root / "__init__.py").resolve()
    before = blob.stat()
    time.sleep(0.05)  # file timestamps tick coarsely: the rewrite must not share the sync's clock tick
    text = blob.read_text()
    first = text.splitlines()[0]  # the module docstring
    evil = 'import os; print("PWNED"); open(os.environ["KL_MARKER"], "w")#'
    assert len(evil) <= len(first)
    with open(blob, "r+") as handle:  # in place: same inode, same size
        handle.write(text.replace(first, evil.ljust(len(first), "#"), 1))
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = blob.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    assert after.st_ctime_ns != before.st_ctime_ns  # only the ctime tells

    assert not syncing.is_synced(p.entry, p.variant, p.cache)
    line = p.assert_refused(p.load(), "__init__.py")  # default verification: the receipt
    assert "does not match kernels.lock" in line
    repaired = p.cli("sync")
    assert repaired.returncode == 0 and "repaired" in repaired.stdout, repaired.stderr
    p.assert_loaded(p.load())


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "forged", ["in the shared kernel cache", "in a group-writable kernlock cache", "in a receipt the group can write"]
)
def test_a_swapped_file_with_a_forged_receipt_is_refused(synced: Project, forged: str):
    """Someone who can write a shared kernel cache swaps a file and writes a receipt that vouches for its new stat.
    Receipts live in kernlock's own cache, which only the user can write: one in the kernel cache (where receipts
    used to be) vouches for nothing, one in a kernlock cache others can write is never read, nor is a receipt file
    others can write (a receipts folder others may enter, 0755, with a receipt a umask of 002 made 0664). The load
    hashes the file and refuses it."""
    p = synced
    receipt = receipt_file(p.entry, p.variant, p.cache)
    assert p.cache not in receipt.parents
    blob = (p.root / "__init__.py").resolve()
    text = blob.read_text()
    blob.write_text(text.replace("\n", "\nimport os; open(os.environ['KL_MARKER'], 'w')\n", 1))
    data = json.loads(receipt.read_text())
    data["files"]["__init__.py"] = {
        "hash": data["files"]["__init__.py"]["hash"],
        "stat": caches.stat_key(blob.stat()),
    }
    if forged == "in the shared kernel cache":
        old = p.cache / f"kernels--{ACTIVATION.replace('/', '--')}" / "kernlock-receipts" / p.entry.commit
        old.mkdir(parents=True)
        (old / f"{p.variant.name}.json").write_text(json.dumps(data))
        receipt.unlink()
    elif forged == "in a group-writable kernlock cache":
        receipt.write_text(json.dumps(data))
        receipt.parents[3].chmod(0o775)  # {kernlock cache}/receipts
    else:
        receipt.parents[3].chmod(0o755)  # {kernlock cache}/receipts: still only the user can add or remove entries
        receipt.chmod(0o664)
        receipt.write_text(json.dumps(data))  # rewritten in place, as the group could
    assert not syncing.is_synced(p.entry, p.variant, p.cache)
    assert "does not match kernels.lock" in p.assert_refused(p.load(), "__init__.py")


@pytest.mark.subprocess
def test_receipts_written_with_a_group_umask_are_the_users_alone_and_vouch(locked: Project):
    """A user whose umask is 002 (a cluster's team folders) syncs: everything kernlock keeps in its own cache
    (receipts, the lock index, Hub answers, remembered answers) is the user's alone, files 0600 and folders 0700 (the
    group could otherwise rewrite a record in place), and a load takes the files on the receipt's word."""
    p = locked
    done = subprocess.run(
        [sys.executable, "-m", "kernlock", "sync", "--project", str(p.project)],
        env=p.env,
        capture_output=True,
        text=True,
        umask=0o002,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    receipt = receipt_file(p.entry, p.variant, p.cache)
    assert stat.S_IMODE(receipt.stat().st_mode) == 0o600
    own = Path(p.env["KERNLOCK_CACHE"])
    modes = {str(path.relative_to(own)): stat.S_IMODE(path.lstat().st_mode) for path in own.rglob("*")}
    assert {"receipts", "lock-index", "hub", "answers"} <= {name.split("/")[0] for name in modes}, sorted(modes)
    assert {name: mode for name, mode in modes.items() if mode & 0o077} == {}
    assert syncing.is_synced(p.entry, p.variant, p.cache)  # stat calls alone: the receipt vouches for every file
    p.assert_loaded(p.load())


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_kernlock_cache_others_can_write_keeps_no_receipts_and_loads_still_verify(locked: Project, tmp_path: Path):
    """With KERNLOCK_CACHE in a folder anyone can write, sync says that no receipts are kept and how to fix it; it
    writes none there, and a load hashes the files instead (and still loads the locked build)."""
    p = locked
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    env = {"KERNLOCK_CACHE": str(shared / "kernlock")}
    result = run_cli("sync", "--project", str(p.project), env={**p.env, **env})
    assert result.returncode == 0, result.stderr
    assert f"no receipts are kept in {shared / 'kernlock' / 'receipts'}" in result.stderr
    assert "not yours alone" in result.stderr and "Point KERNLOCK_CACHE at a folder of your own" in result.stderr
    assert not [f for f in shared.rglob("*") if f.is_file()]
    p.assert_loaded(p.load(**env))


# -- (e) no symlink leads a write (or a load) out of the cache -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("where", ["snapshots/{commit}", "blobs", "refs", ".locks"])
def test_a_symlink_out_of_the_cache_is_refused_and_nothing_is_written_outside(locked: Project, tmp_path: Path, where):
    p = locked
    repo = f"kernels--{ACTIVATION.replace('/', '--')}"
    link = p.cache / ".locks" / repo if where == ".locks" else p.cache / repo / where.format(commit=p.entry.commit)
    sentinel = tmp_path / "outside"
    sentinel.mkdir()
    link.parent.mkdir(parents=True)
    link.symlink_to(sentinel)

    result = p.cli("sync")
    assert list(sentinel.iterdir()) == []
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    assert str(p.cache) in result.stderr and "outside" in result.stderr and "`kernlock sync`" in result.stderr
    if where == "snapshots/{commit}":
        p.assert_refused(p.load(), str(p.cache))  # the not-synced load path refuses too
        with pytest.raises(IntegrityError, match="leads outside"):
            syncing.variant_path(p.entry, p.variant, p.cache)
        assert not syncing.is_synced(p.entry, p.variant, p.cache)
    assert list(sentinel.iterdir()) == []
    link.unlink()  # the fix the message names
    assert p.cli("sync").returncode == 0


# -- nested folders ------------------------------------------------------------------------------------------------


def _hand_built(repo: str, commit: str, contents: dict[str, bytes]) -> tuple[LockedKernel, LockedVariant]:
    """A lock entry of one CPU variant holding ``contents`` (path -> bytes), made by hand (no Hub)."""
    files = tuple(
        LockedFile(path=path, size=len(data), hash="sha256:" + hashlib.sha256(data).hexdigest())
        for path, data in contents.items()
    )
    variant = LockedVariant(name=CPU_ENV, environments=(CPU_ENV,), files=files)
    entry = LockedKernel(
        repo=repo, requested="v1", ref="v1", commit=commit, environments=(CPU_ENV,), variants=(variant,)
    )
    return entry, variant


def _place(
    entry: LockedKernel, variant: LockedVariant, contents: dict[str, bytes], cache: Path, files: Iterable[LockedFile]
) -> Path:
    """Write ``files`` of the variant into ``cache`` as a sync lays them out (blobs, relative symlinks to them);
    the variant folder."""
    root = syncing.variant_path(entry, variant, cache)
    blobs = caches.repo_folder(entry.repo, cache) / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    for locked_file in files:
        (blobs / locked_file.digest).write_bytes(contents[locked_file.path])
        link = root / locked_file.path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blobs / locked_file.digest, link.parent))
    return root


def test_nested_folders_get_a_marker_where_they_hold_python_and_nothing_else(tmp_path: Path):
    """A variant with a package folder (``pkg/__init__.py``) and no .py at its top: one marker, in ``pkg``; a
    symlinked folder or a ``__pycache__`` folder inside ``pkg`` is refused. Built by hand, no Hub."""
    cache = tmp_path / "cache"
    contents = {"metadata.json": b"{}", "pkg/__init__.py": b"X = 1\n", "pkg/lib/data.bin": b"\0\1"}
    entry, variant = _hand_built("org/nested", "a" * 40, contents)
    with pytest.raises(NotSyncedError):
        syncing.check_variant(entry, variant, cache=cache)
    root = _place(entry, variant, contents, cache, variant.files)

    assert syncing.check_variant(entry, variant, cache=cache) == root  # writes the missing marker
    assert _is_marker(root / "pkg" / "__pycache__")
    assert not (root / "__pycache__").exists() and not (root / "pkg" / "lib" / "__pycache__").exists()
    assert syncing.is_synced(entry, variant, cache)

    (root / "pkg" / "__pycache__").unlink()
    (root / "pkg" / "__pycache__").mkdir()
    with pytest.raises(IntegrityError, match=rf"unexpected file build/{CPU_ENV}/pkg/__pycache__ .*`kernlock sync`"):
        syncing.check_variant(entry, variant, cache=cache)
    (root / "pkg" / "__pycache__").rmdir()

    lib = root / "pkg" / "lib"
    elsewhere = tmp_path / "elsewhere"
    lib.rename(elsewhere)
    lib.symlink_to(elsewhere)  # the same files, through a folder symlink
    problems = syncing.verify(
        Lock(requires_hash="sha256:" + "0" * 64, environments=(CPU_ENV,), kernels=(entry,)), [CPU_ENV], cache=cache
    ).problems
    assert [(p.path, p.kind) for p in problems] == [("pkg/lib", FileState.UNEXPECTED)]
    assert "a symlink to" in problems[0].detail


def test_a_variant_not_synced_says_what_is_missing_where(tmp_path: Path):
    """check_variant's NotSyncedError carries what is missing from which kernel cache (``detail``): a load that then
    cannot download the variant keeps it in its message, so the cache it looked in is named. Built by hand, no Hub."""
    from kernlock.errors import VariantNotSynced

    cache = tmp_path / "cache"
    contents = {"__init__.py": b"X = 1\n", "_ops.py": b"Y = 2\n", "metadata.json": b"{}"}
    entry, variant = _hand_built("org/partial", "b" * 40, contents)
    with pytest.raises(VariantNotSynced) as nothing:
        syncing.check_variant(entry, variant, cache=cache)
    assert nothing.value.detail == f"nothing of it is in the kernel cache {cache}"
    assert "is not in the kernel cache" in str(nothing.value) and "`kernlock sync`" in str(nothing.value)
    assert nothing.value.fix == "run `kernlock sync` (online) to download it"

    _place(entry, variant, contents, cache, variant.files[2:])  # metadata.json only
    with pytest.raises(VariantNotSynced) as partly:
        syncing.check_variant(entry, variant, cache=cache)
    assert partly.value.detail == f"__init__.py, _ops.py missing from the kernel cache {cache}"
