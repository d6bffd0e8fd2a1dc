"""A bundle: one uncompressed tar holding a lock, its manifest and every file of the locked variants.

Layout (every member a regular file, in this order)::

    kernlock-bundle/manifest.json          format, version, sha256 of the lock, environments, and per file:
                                           member, repo, commit, variant, path, size, hash (as in kernels.lock)
    kernlock-bundle/manifest.json.sha256   ``<sha256>  manifest.json`` (``sha256sum -c`` checks it once extracted)
    kernlock-bundle/kernels.lock           the lock, byte for byte
    kernlock-bundle/files/<org>/<name>/<commit>/build/<variant>/<path>    the locked files, sorted by member name

The same lock and the same files give the same bytes: fixed mtime, owner and mode, sorted members, PAX format.
Writing and reading stream in 1 MiB chunks, so memory stays flat for a bundle of many GB. An uncompressed tar
is read at random: a reader seeks to a member's data, which lets ``kernlock serve --from`` answer ranges straight
from the bundle. Reading trusts nothing in it: every member must be a regular file that the manifest names
(a link, a device, ``..`` or an absolute name is refused), and every file is checked against the lock.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from kernlock.errors import BundleError, IntegrityError, NotSyncedError
from kernlock.lock import file as lockfile
from kernlock.lock.model import Lock, LockedFile, LockedKernel, LockedVariant
from kernlock.util import names
from kernlock.util.hashing import hasher

__all__ = [
    "FORMAT",
    "LOCK",
    "MANIFEST",
    "MANIFEST_HASH",
    "ROOT",
    "VERSION",
    "Bundle",
    "Member",
    "Pair",
    "load",
    "manifest_for",
    "member_name",
    "write",
]

FORMAT = "kernlock-bundle"
VERSION = 1
ROOT = "kernlock-bundle"
MANIFEST = f"{ROOT}/manifest.json"
MANIFEST_HASH = f"{ROOT}/manifest.json.sha256"
LOCK = f"{ROOT}/kernels.lock"
_HEADER_MEMBERS = (MANIFEST, MANIFEST_HASH, LOCK)
_CHUNK = 1024 * 1024
_MAX_MANIFEST = 64 * 1024 * 1024
Pair = tuple[LockedKernel, LockedVariant]


def member_name(entry: LockedKernel, variant: LockedVariant, locked: LockedFile) -> str:
    """``kernlock-bundle/files/<org>/<name>/<commit>/build/<variant>/<path>``."""
    return f"{ROOT}/files/{entry.repo}/{entry.commit}/build/{variant.name}/{locked.path}"


def _files(pairs: Iterable[Pair]) -> list[tuple[str, LockedKernel, LockedVariant, LockedFile]]:
    """Every locked file of ``pairs`` with its member name, sorted by it."""
    rows = {member_name(e, v, f): (e, v, f) for e, v in pairs for f in v.files}
    return [(name, *rows[name]) for name in sorted(rows)]


class _HashingReader:
    """Reads a file while hashing it the way the lock does."""

    def __init__(self, handle: BinaryIO, locked: LockedFile) -> None:
        self.handle = handle
        self.digest = hasher(locked.algorithm, locked.size)

    def read(self, size: int = -1) -> bytes:
        """The next bytes, hashed."""
        data = self.handle.read(size)
        self.digest.update(data)
        return data


# -- writing -----------------------------------------------------------------------------------------------


def _info(name: str, size: int) -> tarfile.TarInfo:
    """A member header with nothing of the machine in it: mtime 0, owner 0:0, mode 0644."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def manifest_for(lock_bytes: bytes, pairs: list[Pair], environments: list[str]) -> bytes:
    """The manifest of a bundle of ``pairs`` (canonical JSON: the same lock gives the same bytes)."""
    files = [
        {
            "member": name,
            "repo": e.repo,
            "commit": e.commit,
            "variant": v.name,
            "path": f.path,
            "size": f.size,
            "hash": f.hash,
        }
        for name, e, v, f in _files(pairs)
    ]
    data = {
        "format": FORMAT,
        "version": VERSION,
        "lock-sha256": hashlib.sha256(lock_bytes).hexdigest(),
        "environments": sorted(environments),
        "files": files,
    }
    return json.dumps(data, indent=1, sort_keys=True).encode() + b"\n"


def write(out: Path, lock_bytes: bytes, pairs: list[Pair], environments: list[str], sources: dict[str, Path]) -> int:
    """Write the bundle to ``out`` atomically (a temporary file renamed at the end) from the verified files
    ``sources`` (member name -> file); every file is hashed as it is copied and must match the lock.
    Returns the bundle's size in bytes."""
    manifest = manifest_for(lock_bytes, pairs, environments)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
                digest = hashlib.sha256(manifest).hexdigest()
                for name, data in (
                    (MANIFEST, manifest),
                    (MANIFEST_HASH, f"{digest}  manifest.json\n".encode()),
                    (LOCK, lock_bytes),
                ):
                    tar.addfile(_info(name, len(data)), io.BytesIO(data))
                for name, entry, variant, locked in _files(pairs):
                    _add_verified(tar, name, entry, variant, locked, sources[name])
            handle.flush()
            os.fsync(handle.fileno())
            size = handle.tell()
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return size


def _add_verified(
    tar: tarfile.TarFile, name: str, entry: LockedKernel, variant: LockedVariant, locked: LockedFile, source: Path
) -> None:
    with open(source, "rb") as handle:
        if os.fstat(handle.fileno()).st_size != locked.size:
            raise _changed(entry, variant, locked, source)
        reader = _HashingReader(handle, locked)
        tar.addfile(_info(name, locked.size), reader)
    if f"{locked.algorithm}:{reader.digest.hexdigest()}" != locked.hash:
        raise _changed(entry, variant, locked, source)


def _changed(entry: LockedKernel, variant: LockedVariant, locked: LockedFile, source: Path) -> IntegrityError:
    return IntegrityError(
        f"{entry.repo} {variant.name} {locked.path} ({source}) changed while it was bundled and no longer matches "
        "kernels.lock; no bundle was written",
        fix="Run `kernlock sync` to repair the cache, then bundle again",
    )


# -- reading -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """Where a member's bytes are in the bundle file."""

    name: str
    offset: int
    size: int


class Bundle:
    """An opened bundle: its manifest, its lock and where each member's bytes are; a file source for
    :func:`kernlock.sync.engine.sync` (``download`` copies a member, resuming what the destination holds)."""

    remote = False  # a local source: HF_HUB_OFFLINE does not stop it

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.endpoint = f"the bundle {self.path}"
        self.members: dict[str, Member] = {}
        self.manifest: dict[str, Any] = {}
        self._files: list[dict[str, Any]] = []
        self.lock_bytes = b""
        self._scan()
        text = self.lock_bytes.decode("utf-8", "replace")
        self.lock: Lock = lockfile.loads(text, where=f"{self.path} (kernels.lock)")
        self._by_file = {
            (f["repo"], f["commit"], f"build/{f['variant']}/{f['path']}"): self.members[f["member"]] for f in self.files
        }

    @property
    def files(self) -> list[dict[str, Any]]:
        return self._files

    @property
    def environments(self) -> list[str]:
        return list(self.manifest["environments"])

    def _fail(self, why: str) -> BundleError:
        return BundleError(
            f"{self.path} is not a usable kernlock bundle",
            why=f"{why}; nothing was installed",
            fix="Make it again with `kernlock bundle -o FILE` on the connected machine and copy it whole",
        )

    def _scan(self) -> None:
        try:
            tar = tarfile.open(self.path, mode="r:")  # noqa: SIM115 (closed below)
        except (tarfile.TarError, OSError) as err:
            raise self._fail(f"not an uncompressed tar archive ({err})") from err
        expected: set[str] = set(_HEADER_MEMBERS)
        with tar:
            try:
                for index, info in enumerate(tar):
                    self._take(tar, index, info, expected)
            except tarfile.TarError as err:
                raise self._fail(f"the archive is damaged or cut short ({err})") from err
        missing = sorted(expected - set(self.members))
        if missing:
            raise self._fail(f"it lacks {missing[0]}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))

    def _take(self, tar: tarfile.TarFile, index: int, info: tarfile.TarInfo, expected: set[str]) -> None:
        """Check one member: a regular file with a plain relative name that the manifest expects, once."""
        try:
            names.check_path(info.name)
            names.under(Path("/", ROOT), *info.name.split("/")[1:])
        except ValueError as err:
            raise self._fail(f"entry {info.name!r} has an unsafe name ({err})") from err
        if not info.isreg():
            raise self._fail(f"entry {info.name} is not a regular file (a link, folder or device)")
        if info.name in self.members or info.name not in expected:
            raise self._fail(f"entry {info.name} is not named by its manifest, or appears twice")
        if index < len(_HEADER_MEMBERS) and info.name != _HEADER_MEMBERS[index]:
            raise self._fail(f"{_HEADER_MEMBERS[index]} must be entry {index + 1}")
        self.members[info.name] = Member(name=info.name, offset=info.offset_data, size=info.size)
        if info.name == MANIFEST:
            self._read_manifest(tar, info, expected)
        elif info.name == MANIFEST_HASH:
            self._check_manifest_hash(self._read(tar, info))
        elif info.name == LOCK:
            self.lock_bytes = self._read(tar, info)
            if hashlib.sha256(self.lock_bytes).hexdigest() != self.manifest["lock-sha256"]:
                raise self._fail("its kernels.lock does not match the sha256 its manifest records")
        elif info.size != self._sizes[info.name]:
            raise self._fail(f"entry {info.name} has {info.size} bytes, its manifest says {self._sizes[info.name]}")

    def _read(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
        if info.size > _MAX_MANIFEST:
            raise self._fail(f"{info.name} is too large")
        handle = tar.extractfile(info)
        assert handle is not None
        return handle.read()

    def _read_manifest(self, tar: tarfile.TarFile, info: tarfile.TarInfo, expected: set[str]) -> None:
        raw = self._read(tar, info)
        self._manifest_bytes = raw
        try:
            data = json.loads(raw)
            assert data["format"] == FORMAT and data["version"] == VERSION, "format"
            files = data["files"]
            assert isinstance(files, list), "files"
            assert isinstance(data["lock-sha256"], str), "lock-sha256"
            envs = data["environments"]
            assert isinstance(envs, list) and all(isinstance(e, str) for e in envs), "environments"
            for f in files:
                LockedFile(path=f["path"], size=f["size"], hash=f["hash"])  # validated like a lock entry
                names.check_repo(f["repo"]), names.check_commit(f["commit"]), names.check_variant_folder(f["variant"])
                assert f["member"] == f"{ROOT}/files/{f['repo']}/{f['commit']}/build/{f['variant']}/{f['path']}"
        except (ValueError, KeyError, TypeError, AssertionError, RecursionError) as err:
            raise self._fail(f"its manifest is not a kernlock bundle manifest of version {VERSION} ({err})") from err
        self.manifest, self._files = data, files
        self._sizes = {f["member"]: f["size"] for f in files}
        expected.update(self._sizes)

    def _check_manifest_hash(self, raw: bytes) -> None:
        recorded = raw.decode("ascii", "replace").split(" ", 1)[0].strip()
        if recorded != hashlib.sha256(self._manifest_bytes).hexdigest():
            raise self._fail("its manifest does not match manifest.json.sha256")

    # -- as a file source

    def member(self, repo: str, commit: str, path: str) -> Member | None:
        """The member holding ``path`` (``build/<variant>/<file>``) of ``repo`` at ``commit``."""
        return self._by_file.get((repo, commit, path))

    def read(self, member: Member, start: int = 0) -> Iterator[bytes]:
        """The member's bytes from ``start``, in chunks."""
        left = member.size - start
        with open(self.path, "rb") as handle:
            handle.seek(member.offset + start)
            while left > 0:
                chunk = handle.read(min(_CHUNK, left))
                if not chunk:
                    raise self._fail(f"{member.name} is cut short")
                left -= len(chunk)
                yield chunk

    def download(
        self,
        repo: str,
        commit: str,
        path: str,
        dest: Path,
        size: int | None = None,
        tqdm_class: type | None = None,
        algorithm: str | None = None,
    ) -> str | None:
        """Copy the member into ``dest``, resuming from the bytes ``dest`` already holds; None: the caller hashes
        ``dest`` (a bundle is local: no transfer to overlap the hashing with)."""
        member = self.member(repo, commit, path)
        if member is None:
            raise NotSyncedError(f"{self.endpoint} holds no {repo} {path} (commit {commit[:12]})")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "ab") as out:
            have = out.tell()
            if have > member.size:
                out.truncate(0)
                have = 0
            for chunk in self.read(member, have):
                out.write(chunk)
        return None

    def check(self, pairs: list[Pair]) -> None:
        """Every file of ``pairs`` is in the bundle and matches the lock, byte for byte: else one error naming
        every missing or mismatching file. Reads each file once, in chunks."""
        missing, wrong = [], []
        for name, entry, variant, locked in _files(pairs):
            member = self.members.get(name)
            if member is None:
                missing.append(f"{entry.repo} {variant.name}")
                continue
            digest = hasher(locked.algorithm, locked.size)
            for chunk in self.read(member):
                digest.update(chunk)
            actual = f"{locked.algorithm}:{digest.hexdigest()}"
            if member.size != locked.size or actual != locked.hash:
                wrong.append(f"{entry.repo} {variant.name} {locked.path} ({actual}, locked {locked.hash})")
        if wrong:
            more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""
            raise IntegrityError(
                f"{self.path} holds files that do not match kernels.lock",
                why=f"{'; '.join(wrong[:5])}{more}; nothing was installed",
                fix="The bundle was damaged or altered: make it again with `kernlock bundle`",
            )
        if missing:
            raise NotSyncedError(
                f"{self.path} does not hold {', '.join(sorted(set(missing)))} (it was made for "
                f"{', '.join(self.environments)}); nothing was installed",
                fix="Make a bundle with `kernlock bundle --environment ENV` for the environments this machine needs",
            )


def load(path: Path) -> Bundle:
    """The bundle at ``path``, scanned and checked (its lock parsed); a BundleError naming what is wrong."""
    if not Path(path).is_file():
        raise BundleError(
            f"no bundle at {path}", fix=f"make one with `kernlock bundle -o {path}` on the connected machine"
        )
    return Bundle(Path(path))
