"""Lock -> verified files in the Hugging Face cache: exactly the locked variants, in parallel, atomically.

The layout is the standard huggingface_hub cache, so that the kernels library finds the files by itself::

    {cache}/kernels--{org}--{name}/
        blobs/<etag>                                  content; etag = sha256 (LFS files) or git blob sha1
        snapshots/<commit>/build/<variant>/<path>     relative symlinks to ../../../../blobs/<etag>
        refs/<ref>                                    the locked commit of each branch/tag the lock names
        kernlock-receipts/<commit>/<variant>.json     per file: (size, mtime_ns, inode) -> verified hash
    {cache}/.locks/kernels--{org}--{name}/<etag>.lock the blob locks huggingface_hub itself takes

A file is downloaded to ``blobs/<etag>.incomplete`` (resumed if an earlier sync was interrupted), hashed, and
only moved into place when it matches the lock. The receipt lets run-time activation check a variant with a
few ``stat`` calls instead of re-hashing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock
from huggingface_hub import constants
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import tqdm as hf_tqdm

from kernlock.atomic import write_bytes_atomic
from kernlock.errors import IntegrityError, KernlockError, NotSyncedError
from kernlock.hub import Hub
from kernlock.lockfile import Lock, LockedFile, LockedKernel, LockedVariant

RECEIPT_VERSION = 1
RECEIPTS = "kernlock-receipts"
LARGE_FILE = 8 * 1024 * 1024  # files at least this big get a progress bar
FILE_WORKERS = 8
VARIANT_WORKERS = 4
_CHUNK = 1024 * 1024

OK, MISSING, MISMATCH = "ok", "missing", "mismatch"


# -- where things live -------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """The kernels cache: ``$KERNELS_CACHE``, else ``$HF_HUB_CACHE``, else huggingface_hub's default."""
    value = os.environ.get("KERNELS_CACHE") or os.environ.get("HF_HUB_CACHE")
    return Path(value).expanduser() if value else Path(constants.HF_HUB_CACHE)


def repo_folder(repo: str, cache: Path | None = None) -> Path:
    """``{cache}/kernels--{org}--{name}``."""
    return (cache or cache_dir()) / repo_folder_name(repo_id=repo, repo_type="kernel")


def variant_path(entry: LockedKernel, variant: LockedVariant, cache: Path | None = None) -> Path:
    """``{cache}/kernels--{org}--{name}/snapshots/{commit}/build/{variant}``: what the kernels loader imports."""
    return repo_folder(entry.repo, cache) / "snapshots" / entry.commit / "build" / variant.name


def receipt_path(entry: LockedKernel, variant: LockedVariant, cache: Path | None = None) -> Path:
    """``{cache}/kernels--{org}--{name}/kernlock-receipts/{commit}/{variant}.json``."""
    return repo_folder(entry.repo, cache) / RECEIPTS / entry.commit / f"{variant.name}.json"


def _lock_file(repo: str, name: str, cache: Path) -> FileLock:
    folder = cache / ".locks" / repo_folder_name(repo_id=repo, repo_type="kernel")
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / f"{name}.lock"))


# -- results -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """A locked file that is missing or does not match the lock; ``str()`` is the user-facing line."""

    repo: str
    commit: str
    variant: str
    path: str | None  # None: the whole variant is not synced
    kind: str  # "missing" | "mismatch" | "not synced"
    detail: str = ""

    def __str__(self) -> str:
        where = f"{self.repo} {self.variant}" + (f" {self.path}" if self.path else "")
        return f"{where} (commit {self.commit[:12]}): {self.kind}" + (f", {self.detail}" if self.detail else "")


class VerifyResult(list):
    """The problems ``verify`` found (a list of Problem), plus what it checked."""

    def __init__(self, problems: Iterable[Problem], checked: list[str], files: int, cache: Path) -> None:
        super().__init__(problems)
        self.checked = checked  # "repo variant" of every variant that was re-hashed
        self.files = files
        self.cache = cache


@dataclass(frozen=True)
class VariantResult:
    """What sync did for one variant."""

    repo: str
    commit: str
    variant: str
    path: Path
    files: int
    downloaded: tuple[str, ...] = ()  # paths fetched from the Hub
    repaired: tuple[str, ...] = ()  # paths that were present but did not match the lock
    downloaded_bytes: int = 0

    @property
    def status(self) -> str:
        return "repaired" if self.repaired else "downloaded" if self.downloaded else "present"


@dataclass(frozen=True)
class SyncReport:
    """The outcome of a sync: every variant it made sure of, where, and whether the lock was re-written first."""

    cache: Path
    environments: tuple[str, ...]
    variants: tuple[VariantResult, ...]
    offline: bool = False
    relocked: str | None = None  # why kernels.lock was re-written before syncing (default mode)
    kernels: tuple[str, ...] = field(default=())

    @property
    def downloaded_files(self) -> int:
        return sum(len(v.downloaded) for v in self.variants)

    @property
    def downloaded_bytes(self) -> int:
        return sum(v.downloaded_bytes for v in self.variants)


# -- hashing and receipts ----------------------------------------------------------------------------------


def file_hash(path: Path, algorithm: str) -> str:
    """``sha256:<hex>`` of the content, or ``git-sha1:<hex>`` (the git blob id) of ``path``."""
    with open(path, "rb") as handle:
        if algorithm == "sha256":
            digest = hashlib.sha256()
        elif algorithm == "git-sha1":
            digest = hashlib.sha1()
            digest.update(b"blob %d\0" % os.fstat(handle.fileno()).st_size)
        else:
            raise ValueError(f"unknown hash algorithm {algorithm!r}")
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return f"{algorithm}:{digest.hexdigest()}"


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _read_receipt(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("receipt-version") != RECEIPT_VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _write_receipt(
    entry: LockedKernel, variant: LockedVariant, records: dict[str, Any], cache: Path, strict: bool = False
) -> None:
    """Write the receipt atomically; a read-only cache only loses the shortcut unless ``strict``."""
    data = {
        "receipt-version": RECEIPT_VERSION,
        "repo": entry.repo,
        "commit": entry.commit,
        "variant": variant.name,
        "files": {path: records[path] for path in sorted(records)},
    }
    try:
        write_bytes_atomic(receipt_path(entry, variant, cache), json.dumps(data, indent=1).encode())
    except OSError:
        if strict:
            raise


# -- inspecting a variant ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FileState:
    file: LockedFile
    state: str
    detail: str = ""


@dataclass(frozen=True)
class _Inspection:
    files: tuple[_FileState, ...]
    records: dict[str, Any]  # receipt records of every file found correct
    receipt_changed: bool
    present: bool  # anything of this variant (a file or a receipt) is in the cache

    def bad(self, state: str) -> list[_FileState]:
        return [f for f in self.files if f.state == state]

    @property
    def ok(self) -> bool:
        return all(f.state == OK for f in self.files)


def _inspect(entry: LockedKernel, variant: LockedVariant, cache: Path, full: bool) -> _Inspection:
    """Check every locked file: by its receipt (stat only) where the receipt still holds, else by hashing it."""
    root = variant_path(entry, variant, cache)
    receipt_file = receipt_path(entry, variant, cache)
    receipt = {} if full else _read_receipt(receipt_file)
    states, records, changed, present = [], {}, False, receipt_file.exists()
    for locked in variant.files:
        state, record = _inspect_file(root / locked.path, locked, receipt.get(locked.path), full)
        present = present or state.state != MISSING
        states.append(state)
        if record is not None:
            records[locked.path] = record
            changed = changed or record != receipt.get(locked.path)
    return _Inspection(tuple(states), records, changed or full, present)


def _inspect_file(path: Path, locked: LockedFile, record: Any, full: bool) -> tuple[_FileState, dict[str, Any] | None]:
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return _FileState(locked, MISSING), None
    key = _stat_key(st)
    if not full and isinstance(record, dict) and record.get("hash") == locked.hash and record.get("stat") == key:
        return _FileState(locked, OK), record
    if st.st_size != locked.size:
        return _FileState(locked, MISMATCH, f"size {st.st_size} bytes, locked {locked.size}"), None
    actual = file_hash(path, locked.algorithm)
    if actual != locked.hash:
        return _FileState(locked, MISMATCH, f"hash {actual}, locked {locked.hash}"), None
    return _FileState(locked, OK), {"hash": locked.hash, "stat": key}


def _describe(entry: LockedKernel, variant: LockedVariant, states: list[_FileState], limit: int = 3) -> str:
    names = ", ".join(f"{s.file.path} ({s.detail})" if s.detail else s.file.path for s in states[:limit])
    more = f" and {len(states) - limit} more" if len(states) > limit else ""
    return f"{entry.repo} {variant.name} (commit {entry.commit[:12]}): {names}{more}"


def check_variant(entry: LockedKernel, variant: LockedVariant, full: bool = False, cache: Path | None = None) -> Path:
    """The variant's folder, once every file is checked against the lock: by its receipt (size, mtime,
    inode), re-hashing a file whose receipt no longer holds, or re-hashing everything with ``full``.

    Raises IntegrityError for a file that does not match the lock, NotSyncedError for missing files.
    """
    cache = cache or cache_dir()
    inspection = _inspect(entry, variant, cache, full)
    mismatched = inspection.bad(MISMATCH)
    if mismatched:
        raise IntegrityError(
            f"{_describe(entry, variant, mismatched)} in {cache} do(es) not match kernels.lock; "
            "run `kernlock sync` to replace it (never loaded as is)."
        )
    missing = inspection.bad(MISSING)
    if missing:
        raise NotSyncedError(_not_synced_message(entry, variant, missing, cache, inspection.present))
    if inspection.receipt_changed:
        _write_receipt(entry, variant, inspection.records, cache)
    return variant_path(entry, variant, cache)


def _not_synced_message(
    entry: LockedKernel, variant: LockedVariant, missing: list[_FileState], cache: Path, present: bool
) -> str:
    if not present:
        return (
            f"{entry.repo} {variant.name} (commit {entry.commit[:12]}) is not in the kernel cache {cache}; "
            "run `kernlock sync` (online) to download it."
        )
    return f"{_describe(entry, variant, missing)} missing from {cache}; run `kernlock sync` (online) to download it."


def is_synced(entry: LockedKernel, variant: LockedVariant, cache: Path | None = None) -> bool:
    """True when the receipt vouches for every file as it is now (stat only, never hashes)."""
    cache = cache or cache_dir()
    receipt = _read_receipt(receipt_path(entry, variant, cache))
    root = variant_path(entry, variant, cache)
    for locked in variant.files:
        record = receipt.get(locked.path)
        try:
            key = _stat_key(os.stat(root / locked.path))
        except OSError:
            return False
        if not isinstance(record, dict) or record.get("hash") != locked.hash or record.get("stat") != key:
            return False
    return True


# -- fetching ----------------------------------------------------------------------------------------------


class _LargeFileBar(hf_tqdm):
    """huggingface_hub's progress bar, shown only for large files."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        total = kwargs.get("total")
        if total is None or total < LARGE_FILE:
            kwargs["disable"] = True
        super().__init__(*args, **kwargs)


class _NoBar(hf_tqdm):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = True
        super().__init__(*args, **kwargs)


def _blob(entry: LockedKernel, locked: LockedFile, cache: Path) -> Path:
    return repo_folder(entry.repo, cache) / "blobs" / locked.digest


def _link(blob: Path, link: Path) -> None:
    """Point ``link`` at ``blob`` with a relative symlink (as huggingface_hub does), replacing atomically."""
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(blob, link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return
    tmp = link.with_name(f".{link.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        os.symlink(target, tmp)
    except OSError:  # no symlinks on this file system: a copy, like huggingface_hub's fallback
        shutil.copyfile(blob, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _download_verified(
    hub: Hub, entry: LockedKernel, variant: LockedVariant, locked: LockedFile, dest: Path, bar: type
) -> None:
    """Download into ``dest`` (resuming what it holds) until its hash matches the lock; a wrong file is removed."""
    remote = f"build/{variant.name}/{locked.path}"
    for _attempt in range(2):
        hub.download(entry.repo, entry.commit, remote, dest, size=locked.size, tqdm_class=bar)
        actual = file_hash(dest, locked.algorithm)
        if actual == locked.hash:
            return
        dest.unlink(missing_ok=True)  # a wrong (or wrongly resumed) download never stays, even as .incomplete
    raise IntegrityError(
        f"{hub.endpoint} served {entry.repo} {variant.name} {locked.path} (commit {entry.commit[:12]}) with "
        f"{actual}, but kernels.lock records {locked.hash}; nothing was installed. Retry `kernlock sync`; if it "
        "persists the endpoint serves other content than the lock was made from (check HF_ENDPOINT)."
    )


def _install_file(
    hub: Hub, entry: LockedKernel, variant: LockedVariant, locked: LockedFile, cache: Path, bar: type
) -> int:
    """Make ``snapshots/.../<path>`` point at a verified blob; returns the bytes downloaded (0: blob reused)."""
    blob = _blob(entry, locked, cache)
    downloaded = 0
    with _lock_file(entry.repo, locked.digest, cache):
        reusable = (
            blob.is_file() and blob.stat().st_size == locked.size and file_hash(blob, locked.algorithm) == locked.hash
        )
        if not reusable:
            incomplete = blob.with_name(blob.name + ".incomplete")
            _download_verified(hub, entry, variant, locked, incomplete, bar)
            os.replace(incomplete, blob)
            downloaded = locked.size
    _link(blob, variant_path(entry, variant, cache) / locked.path)
    return downloaded


def _fetch_variant(
    entry: LockedKernel,
    variant: LockedVariant,
    hub: Hub,
    cache: Path,
    pool: ThreadPoolExecutor,
    bar: type,
) -> VariantResult:
    """Under the variant's file lock: check, then fetch exactly the files that are missing or wrong."""
    with _lock_file(entry.repo, f"kernlock-{entry.commit}-{variant.name}", cache):
        inspection = _inspect(entry, variant, cache, full=False)
        todo = [s for s in inspection.files if s.state != OK]
        futures: dict[str, Future[int]] = {
            s.file.path: pool.submit(_install_file, hub, entry, variant, s.file, cache, bar) for s in todo
        }
        sizes = _gather(futures)
        records = dict(inspection.records)
        root = variant_path(entry, variant, cache)
        for path in futures:
            locked = next(f for f in variant.files if f.path == path)
            records[path] = {"hash": locked.hash, "stat": _stat_key(os.stat(root / path))}
        if todo or inspection.receipt_changed:
            _write_receipt(entry, variant, records, cache, strict=True)
    return VariantResult(
        entry.repo,
        entry.commit,
        variant.name,
        root,
        len(variant.files),
        tuple(sorted(p for p, size in sizes.items() if size)),
        tuple(sorted(s.file.path for s in todo if s.state == MISMATCH)),
        sum(sizes.values()),
    )


def _gather(futures: dict[str, Future[Any]]) -> dict[str, Any]:
    """Wait for every future (so nothing is left running), then raise the first failure."""
    results, error = {}, None
    for key, future in futures.items():
        try:
            results[key] = future.result()
        except BaseException as err:
            error = error or err
    if error is not None:
        raise error
    return results


def _write_ref(entry: LockedKernel, cache: Path) -> None:
    """``refs/<ref>`` = the locked commit, so kernels' offline ``version=N`` lookup finds the locked build."""
    if entry.ref == entry.commit or not entry.ref or ".." in entry.ref.split("/"):
        return
    path = repo_folder(entry.repo, cache) / "refs" / entry.ref
    try:
        if path.is_file() and path.read_text().strip() == entry.commit:
            return
        write_bytes_atomic(path, entry.commit.encode())
    except OSError:
        pass


def _cache_error(cache: Path, err: OSError) -> KernlockError:
    return KernlockError(
        f"cannot write to the kernel cache {cache} ({err.strerror or err}); make it writable or point "
        "KERNELS_CACHE (or HF_HUB_CACHE) at a writable folder, then run `kernlock sync` again."
    )


def ensure_variant(
    entry: LockedKernel,
    variant: LockedVariant,
    hub: Hub | None = None,
    offline: bool = False,
    cache: Path | None = None,
) -> Path:
    """The variant's verified folder; fetches exactly the locked files that are missing or wrong unless
    ``offline`` (then NotSyncedError / IntegrityError naming `kernlock sync`)."""
    cache = cache or cache_dir()
    try:
        return check_variant(entry, variant, cache=cache)
    except (NotSyncedError, IntegrityError):
        if offline or constants.HF_HUB_OFFLINE:
            raise
    with ThreadPoolExecutor(FILE_WORKERS) as pool:
        try:
            result = _fetch_variant(entry, variant, hub or Hub(), cache, pool, _NoBar)
        except OSError as err:
            raise _cache_error(cache, err) from err
    _write_ref(entry, cache)
    return result.path


# -- sync and verify ---------------------------------------------------------------------------------------


def targets(lock: Lock, environments: Iterable[str] | None) -> list[tuple[LockedKernel, LockedVariant]]:
    """Every (entry, variant) the given environments load (None: every variant of the lock), deduplicated."""
    wanted = None if environments is None else list(environments)
    seen: dict[tuple[str, str, str], tuple[LockedKernel, LockedVariant]] = {}
    for entry in lock.kernels:
        for variant in entry.variants:
            if wanted is not None and not set(wanted) & set(variant.environments):
                continue
            seen.setdefault((entry.repo, entry.commit, variant.name), (entry, variant))
    return list(seen.values())


def sync(
    lock: Lock,
    environments: list[str],
    hub: Hub | None = None,
    offline: bool = False,
    cache: Path | None = None,
    progress: bool = True,
) -> SyncReport:
    """Make the cache hold exactly the locked, verified files of every variant ``environments`` load.

    Files whose receipt still holds cost a ``stat`` and no request. ``offline``: only check, and raise one
    error naming every missing or corrupt file.
    """
    cache = cache or cache_dir()
    unknown = sorted(set(environments) - set(lock.environments))
    if unknown:
        raise NotSyncedError(
            f"kernels.lock has no entries for {', '.join(unknown)} (it covers {', '.join(lock.environments)}); "
            "add the environment to [tool.kernlock] environments and run `kernlock lock`."
        )
    pairs = targets(lock, environments)
    offline = offline or constants.HF_HUB_OFFLINE
    if offline:
        results = _check_offline(pairs, cache)
    else:
        results = _sync_online(pairs, hub or Hub(), cache, _LargeFileBar if progress else _NoBar)
        for entry, _variant in pairs:
            _write_ref(entry, cache)
    return SyncReport(
        cache, tuple(environments), tuple(results), offline, kernels=tuple(sorted({e.repo for e, _ in pairs}))
    )


def _sync_online(
    pairs: list[tuple[LockedKernel, LockedVariant]], hub: Hub, cache: Path, bar: type
) -> list[VariantResult]:
    def one(entry: LockedKernel, variant: LockedVariant) -> VariantResult:
        if is_synced(entry, variant, cache):  # the no-op path: stat calls only, no lock file, no request
            return VariantResult(
                entry.repo, entry.commit, variant.name, variant_path(entry, variant, cache), len(variant.files)
            )
        return _fetch_variant(entry, variant, hub, cache, files, bar)

    try:
        with ThreadPoolExecutor(FILE_WORKERS) as files, ThreadPoolExecutor(VARIANT_WORKERS) as variants:
            futures = {f"{e.repo} {v.name}": variants.submit(one, e, v) for e, v in pairs}
            return list(_gather(futures).values())
    except OSError as err:
        raise _cache_error(cache, err) from err


def _check_offline(pairs: list[tuple[LockedKernel, LockedVariant]], cache: Path) -> list[VariantResult]:
    """Check every target without any request; one error lists everything missing or corrupt."""
    results, missing, corrupt = [], [], []
    for entry, variant in pairs:
        inspection = _inspect(entry, variant, cache, full=False)
        corrupt += [_describe(entry, variant, [s]) for s in inspection.bad(MISMATCH)]
        absent = inspection.bad(MISSING)
        if absent:
            missing.append(_describe(entry, variant, absent) if inspection.present else f"{entry.repo} {variant.name}")
        if inspection.ok:
            if inspection.receipt_changed:
                _write_receipt(entry, variant, inspection.records, cache)
            results.append(
                VariantResult(
                    entry.repo, entry.commit, variant.name, variant_path(entry, variant, cache), len(variant.files)
                )
            )
    if corrupt or missing:
        parts = ([f"do not match kernels.lock: {'; '.join(corrupt)}"] if corrupt else []) + (
            [f"not in the cache: {'; '.join(missing)}"] if missing else []
        )
        error = IntegrityError if corrupt else NotSyncedError
        raise error(
            f"offline sync into {cache} found locked files that {' | '.join(parts)}; "
            "run `kernlock sync` online (without --offline, HF_HUB_OFFLINE unset) to download or replace them."
        )
    return results


def verify(lock: Lock, environments: list[str] | None = None, cache: Path | None = None) -> VerifyResult:
    """Re-hash every locked variant present in the cache; the variants ``environments`` load must be present.

    Returns the problems (empty: all intact) and refreshes the receipts of intact variants.
    """
    cache = cache or cache_dir()
    required = {(e.repo, e.commit, v.name) for e, v in targets(lock, environments or [])}
    problems: list[Problem] = []
    checked: list[str] = []
    files = 0

    def inspect(pair: tuple[LockedKernel, LockedVariant]) -> _Inspection:
        return _inspect(pair[0], pair[1], cache, full=True)

    pairs = targets(lock, None)
    with ThreadPoolExecutor(FILE_WORKERS) as pool:
        inspections = list(pool.map(inspect, pairs))
    for (entry, variant), inspection in zip(pairs, inspections, strict=True):
        if not inspection.present:
            if (entry.repo, entry.commit, variant.name) in required:
                problems.append(
                    Problem(entry.repo, entry.commit, variant.name, None, "not synced", "run `kernlock sync`")
                )
            continue
        checked.append(f"{entry.repo} {variant.name}")
        files += len(variant.files)
        for state in inspection.files:
            if state.state != OK:
                problems.append(
                    Problem(entry.repo, entry.commit, variant.name, state.file.path, state.state, state.detail)
                )
        if inspection.ok:
            _write_receipt(entry, variant, inspection.records, cache)
    return VerifyResult(problems, checked, files, cache)
