"""Bring one locked variant into the cache: download exactly the files that are missing or wrong, verified.

A file is downloaded to this process's ``blobs/<etag>.<host>-<pid>-<thread>.incomplete`` (resumed from what an
interrupted sync left, :mod:`kernlock.util.sharing`), hashed, and only moved into place when it matches the lock; then
its ``snapshots/...`` symlink is pointed at it. Only ``sync`` and the run-time path of a variant that is not synced yet
import this module; it imports the network stack (through :class:`kernlock.hub.client.Hub`) only when a file must really
be fetched.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache as memoize
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kernlock.errors import CacheError, IntegrityError, KernlockError, NotSyncedError, SignedDigestError
from kernlock.lock.model import LockedFile, LockedKernel, LockedVariant
from kernlock.sync import refusals
from kernlock.sync.cache import (
    blob_path,
    cache_dir,
    file_hash,
    in_variant,
    link_target,
    markers,
    ref_file,
    stat_key,
    under,
    unlink_symlink,
    write_receipt,
)
from kernlock.sync.integrity import FileCheck, FileState, check_variant, inspect_variant, place_markers
from kernlock.sync.publish import discard, publish, staging_folder
from kernlock.sync.signatures import SignatureCheck
from kernlock.util import hfenv, interrupt
from kernlock.util.atomic import unwritable, write_bytes_atomic
from kernlock.util.sharing import cache_lock, claim_partial, make_folder
from kernlock.util.wording import RETRY_SYNC

if TYPE_CHECKING:  # the network stack is imported only when a request is about to be made
    from concurrent.futures import Future, ThreadPoolExecutor
    from contextlib import AbstractContextManager


__all__ = [
    "FILE_WORKERS",
    "FileSource",
    "VariantResult",
    "cache_error",
    "client",
    "ensure_variant",
    "fetch_variant",
    "gather",
    "progress_bar",
    "write_ref",
]

LARGE_FILE = 8 * 1024 * 1024  # files at least this big get a progress bar
FILE_WORKERS = 8
T = TypeVar("T")
K = TypeVar("K")


class FileSource(Protocol):
    """Where sync gets a file's bytes: the Hub (:class:`kernlock.hub.client.Hub`) or a bundle
    (:class:`kernlock.airgap.bundle.Bundle`). Whatever it writes is hashed before it becomes visible."""

    endpoint: str  # named in messages

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
        """Write ``path`` at ``commit`` into ``dest``, resuming from the bytes ``dest`` already holds; the
        ``algorithm:hex`` hash of all of ``dest`` if it hashed the bytes as it wrote them, else None."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VariantResult:
    """What sync did for one variant."""

    repo: str
    commit: str
    variant: str
    path: Path
    files: int
    #: paths installed into the variant from the source (each fetched, or a blob another variant of the same
    #: sync had just fetched: counting per variant what it needed keeps the counts the same from run to run)
    downloaded: tuple[str, ...] = ()
    repaired: tuple[str, ...] = ()  # paths that were present but did not match the lock
    downloaded_bytes: int = 0
    removed: tuple[str, ...] = ()  # entries of the variant folder the lock does not name, removed

    @property
    def status(self) -> str:
        """``present``, ``downloaded`` or ``repaired``."""
        return "repaired" if self.repaired or self.removed else "downloaded" if self.downloaded else "present"


def _lock_file(repo: str, name: str, cache: Path) -> AbstractContextManager[None]:
    """The lock of one file or variant in the cache: group-shareable, skipped where the filesystem cannot lock."""
    return cache_lock(under(cache, ".locks", hfenv.repo_folder(repo), f"{name}.lock"))


@memoize
def progress_bar(progress: bool) -> type:
    """huggingface_hub's progress bar, shown only for large files (``progress``), or never."""
    from huggingface_hub.utils import tqdm as hf_tqdm  # type: ignore[attr-defined]  # a lazy attribute

    class _LargeFileBar(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            total = kwargs.get("total")
            if not progress or total is None or total < LARGE_FILE:
                kwargs["disable"] = True
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]  # huggingface_hub's is untyped

    return _LargeFileBar


def client(hub: FileSource | None) -> Callable[[], FileSource]:
    """``hub``, else a Hub made at the first call (thread-safe): a sync with nothing to fetch imports no HTTP."""
    made: list[FileSource] = [hub] if hub is not None else []
    guard = threading.Lock()

    def get() -> FileSource:
        with guard:
            if not made:
                from kernlock.hub.client import Hub

                made.append(Hub())
            return made[0]

    return get


def _link(blob: Path, link: Path, target: str) -> None:
    """Point ``link`` at ``blob`` with the relative symlink ``target`` (as huggingface_hub does), atomically.

    Where nothing is in its place yet (a first sync), the link is made right there: a symlink appears whole or not
    at all. Only an entry to be replaced goes through a temporary name beside it, and a process killed between
    the two steps leaves that name in the variant folder (verify reports it, the next sync removes it)."""
    make_folder(link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return
    import shutil  # ~5 ms: only a sync that links files pays it

    if link.is_dir() and not link.is_symlink():  # a folder where the lock has a file
        shutil.rmtree(link)
    try:
        os.symlink(target, link)
        return
    except OSError:  # a wrong link or file to replace (FileExistsError), or no symlinks on this file system
        pass
    tmp = link.with_name(f".{link.name}.{os.urandom(4).hex()}.tmp")  # not uuid: ~5 ms to import
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
    hub: FileSource, entry: LockedKernel, variant: LockedVariant, locked: LockedFile, dest: Path, bar: type
) -> None:
    """Download into ``dest`` (resuming what it holds) until its hash matches the lock; a wrong file is removed."""
    remote = f"build/{variant.name}/{locked.path}"
    for _attempt in range(2):
        hashed = hub.download(
            entry.repo, entry.commit, remote, dest, size=locked.size, tqdm_class=bar, algorithm=locked.algorithm
        )
        actual = hashed or file_hash(dest, locked.algorithm)  # hashed as it was written: no second pass
        if actual == locked.hash:
            return
        dest.unlink(missing_ok=True)  # a wrong (or wrongly resumed) download never stays, even as .incomplete
    raise IntegrityError(
        f"{hub.endpoint} served {entry.repo} {variant.name} {locked.path} (commit {entry.commit[:12]}) with "
        f"{actual}, but kernels.lock records {locked.hash}; nothing was installed",
        fix=RETRY_SYNC,
    )


def _install_file(
    hub: FileSource,
    entry: LockedKernel,
    variant: LockedVariant,
    locked: LockedFile,
    cache: Path,
    bar: type,
    root: Path,
) -> int:
    """Make ``root/<path>`` point at a verified blob; returns the bytes downloaded (0: blob reused)."""
    blob = blob_path(entry, locked, cache)
    link = in_variant(root, locked.path, cache)
    downloaded = 0
    with _lock_file(entry.repo, locked.digest, cache):
        reusable = (
            not blob.is_symlink()  # a blob is a regular file; a symlink is replaced, never followed
            and blob.is_file()
            and blob.stat().st_size == locked.size
            and file_hash(blob, locked.algorithm) == locked.hash
        )
        if not reusable:
            make_folder(blob.parent)
            incomplete = claim_partial(blob)  # this process's own: never shared, never half-visible
            unlink_symlink(incomplete)  # never download through a symlink
            try:
                _download_verified(hub, entry, variant, locked, incomplete, bar)
            except OSError as err:
                if err.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk: no partial file stays behind
                    incomplete.unlink(missing_ok=True)
                raise
            os.replace(incomplete, blob)
            downloaded = locked.size
    _link(blob, link, link_target(locked))
    return downloaded


def _keep_file(state: FileCheck, entry: LockedKernel, root: Path, staged: Path, cache: Path) -> bool:
    """Carry a locked file the variant folder already holds intact into the staging folder (the same symlink, or
    a hard link to the same copy); False when it cannot be carried (then it is installed like a missing one)."""
    source = in_variant(root, state.file.path, cache)
    target = in_variant(staged, state.file.path, cache)
    make_folder(target.parent)
    try:
        if source.is_symlink():
            if not blob_path(entry, state.file, cache).is_file():
                return False
            os.symlink(os.readlink(source), target)
        else:
            os.link(source, target)
    except OSError:
        return False
    return True


def fetch_variant(
    entry: LockedKernel,
    variant: LockedVariant,
    hub: FileSource,
    cache: Path,
    pool: ThreadPoolExecutor,
    bar: type,
    signatures: SignatureCheck | None = None,
) -> VariantResult:
    """Under the variant's file lock: check the variant folder; unless it is intact, assemble the variant in a
    staging folder (the intact files carried over, exactly the missing or wrong ones fetched, the ``__pycache__``
    markers), verify its recorded signature there, and only then make it the variant folder in one rename (nothing
    it would replace stays); then write the receipt. A variant whose signature fails is refused
    (:mod:`kernlock.sync.refusals`) and SignatureError raised: it never becomes visible.
    ``signatures``: the check to use (None: a new one, against ``$KERNLOCK_SIGSTORE_TRUSTED_ROOT`` or sigstore's
    public-good root)."""
    check = signatures or SignatureCheck()
    with _lock_file(entry.repo, f"kernlock-{entry.commit}-{variant.name}", cache):
        inspection = inspect_variant(entry, variant, cache, full=False)
        root = inspection.root
        todo = [s for s in inspection.files if s.state != FileState.OK]
        sizes: dict[str, int] = {}
        if todo or inspection.extras:
            staged = staging_folder(entry, variant, cache)
            try:
                for state in inspection.files:
                    if state.state == FileState.OK and not _keep_file(state, entry, root, staged, cache):
                        todo.append(state)
                futures: dict[str, Future[int]] = {
                    s.file.path: pool.submit(_install_file, hub, entry, variant, s.file, cache, bar, staged)
                    for s in todo
                }
                sizes = gather(futures)
                place_markers(staged, markers(variant), cache, strict=True)
                _refuse_unless_signed(check, entry, variant, staged, cache)
                publish(staged, root)
            except BaseException:
                discard(staged)
                raise
        else:
            if inspection.receipt_changed:  # intact, but no receipt vouched for it: its signature too is checked
                _refuse_unless_signed(check, entry, variant, root, cache)
            place_markers(root, inspection.markers, cache, strict=True)
        if todo or inspection.extras or inspection.receipt_changed:
            records = dict(inspection.records)
            if todo or inspection.extras:  # a new folder: every file's stat is read again (a hard link moves ctime)
                records = {
                    f.path: {"hash": f.hash, "stat": stat_key(os.stat(in_variant(root, f.path, cache)))}
                    for f in variant.files
                }
            write_receipt(entry, variant, records, cache, strict=True)
            refusals.clear(entry, variant, cache)
    return VariantResult(
        repo=entry.repo,
        commit=entry.commit,
        variant=variant.name,
        path=root,
        files=len(variant.files),
        downloaded=tuple(sorted(sizes)),
        repaired=tuple(sorted(s.file.path for s in inspection.files if s.state == FileState.MISMATCH)),
        downloaded_bytes=sum(s.file.size for s in todo),
        removed=tuple(sorted(extra.path or "." for extra in inspection.extras)),
    )


def _refuse_unless_signed(
    check: SignatureCheck, entry: LockedKernel, variant: LockedVariant, root: Path, cache: Path
) -> None:
    """Raise the SignatureError of files in ``root`` that fail the variant's recorded signature; files that disagree
    with the signed digest are refused first (withdrawn from the cache, the reason kept for loads)."""
    error = check.failure(entry, variant, root=root)
    if isinstance(error, SignedDigestError):
        refusals.refuse(entry, variant, cache, str(error))
    if error is not None:
        raise error


def gather(futures: dict[K, Future[T]]) -> dict[K, T]:
    """Every future's result. On the first failure, what has not started is cancelled and what runs is waited for
    (so no task outlives the call), then the failure is raised; an interrupt propagates at once."""
    from concurrent.futures import FIRST_EXCEPTION, wait

    _done, pending = wait(futures.values(), return_when=FIRST_EXCEPTION)
    for future in futures.values():
        error = future.exception() if future.done() and not future.cancelled() else None
        if error is not None:
            for other in pending:
                other.cancel()
            wait(pending)
            raise error
    return {key: future.result() for key, future in futures.items()}


def write_ref(entry: LockedKernel, cache: Path) -> None:
    """``refs/<ref>`` = the locked commit, so kernels' offline ``version=N`` lookup finds the locked build.

    Only that lookup needs it (kernlock itself loads by commit): a cache where it cannot be written (read-only,
    full) keeps working for every activated load, so that is no error of the sync; any other OSError is."""
    path = ref_file(entry, cache)
    if path is None:
        return
    try:
        unlink_symlink(path)
        if path.is_file() and path.stat().st_size <= 64 and path.read_text().strip() == entry.commit:
            return
        write_bytes_atomic(path, entry.commit.encode())
    except OSError as err:
        if not unwritable(err):
            raise cache_error(cache, err) from err
        # Skipped with reason: only kernels' own ``version=N`` lookup reads refs/, every locked load is by commit.


def cache_error(cache: Path, err: OSError) -> KernlockError:
    """The message for a cache kernlock cannot write to (a full disk is named as such)."""
    from kernlock.sync import disk_space

    why, fix = f"{err.strerror or err}", disk_space.WRITABLE
    return disk_space.full_disk(cache, err) or CacheError(f"cannot write to the kernel cache {cache}", why=why, fix=fix)


def ensure_variant(
    entry: LockedKernel,
    variant: LockedVariant,
    hub: FileSource | None = None,
    offline: bool = False,
    cache: Path | None = None,
    signatures: SignatureCheck | None = None,
) -> Path:
    """The variant's verified folder; fetches exactly the locked files that are missing or wrong unless
    ``offline`` (then NotSyncedError / IntegrityError naming `kernlock sync`). A fetched variant's signature is
    checked by ``signatures`` (:func:`fetch_variant`) before it becomes visible."""
    cache = cache or cache_dir()
    try:
        return check_variant(entry, variant, cache=cache)
    except (NotSyncedError, IntegrityError):
        if offline or hfenv.offline():
            raise
    interrupt.reset()  # a load after an interrupted one (library use) fetches again
    from kernlock.sync import disk_space

    disk_space.require_space([(entry, variant)], cache)
    with interrupt.worker_pool(FILE_WORKERS) as pool:
        try:
            result = fetch_variant(entry, variant, client(hub)(), cache, pool, progress_bar(False), signatures)
        except OSError as err:
            raise cache_error(cache, err) from err
    write_ref(entry, cache)
    return result.path
