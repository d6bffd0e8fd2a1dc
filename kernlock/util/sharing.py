"""A kernel cache that several users, ranks and nodes share (docs/clusters.md).

- **Folders** kernlock creates take the group sharing of the folder they are made in: below a group-writable
  folder (a setgid team cache, ``chmod 2775``) a new folder is group-writable and setgid too, whatever the umask,
  so a second user of the group can add what is missing. Elsewhere the umask is respected as it is.
- **Lock files** are made group-writable in such a folder (huggingface_hub makes its own 0664), so the second user
  can wait on the first one's lock. Where the filesystem refuses ``flock`` (NFS without a lock manager, Lustre
  without ``-o flock``: ENOLCK, ENOSYS), the lock is skipped: kernlock's cache stays right without it.
- **Partial downloads** are per process (``<blob>.<host>-<pid>-<thread>.incomplete``) and become visible only by
  an atomic rename after their hash matched the lock: processes on a filesystem whose ``flock`` locks nothing (or
  only on its own node) may download a file twice, but never interleave writes or show a half file. A partial file
  left by a process that is gone (same host, dead pid; another host's after ten idle minutes) or by an older kernlock
  (``<blob>.incomplete``) is taken over by rename, so an interrupted download still resumes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["GITIGNORE", "REFUSED", "cache_lock", "claim_partial", "kernlock_folder", "make_folder", "partial_name"]

#: What ``flock`` (or opening a lock file) answers where the filesystem or the cache cannot lock.
REFUSED = frozenset(
    {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.EROFS}
)
_ORPHAN_AFTER = 600.0  # seconds without a write: another host's partial file is taken over


#: ``.kernlock/.gitignore`` beside a project's lock: what kernlock keeps there (the project lock, `kernlock run`'s
#: sitecustomize) is never committed.
GITIGNORE = "# Written by kernlock: nothing here is committed.\n*\n"


def kernlock_folder(project: Path) -> Path:
    """``project/.kernlock`` (made if missing, with its ``.gitignore``)."""
    folder = project / ".kernlock"
    ignore = folder / ".gitignore"
    if not ignore.is_file():
        make_folder(folder)
        with contextlib.suppress(FileExistsError):  # another process wrote it first
            fd = os.open(ignore, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
            try:
                os.write(fd, GITIGNORE.encode())
            finally:
                os.close(fd)
    return folder


def make_folder(path: Path) -> None:
    """``path`` and what is missing above it, each new folder group-writable and setgid where its parent is
    group-writable (chmod, so the umask does not take the group's write bit away); checked again on every call, so a
    folder a racing thread created is fixed too."""
    missing: list[Path] = []
    folder = path
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):
            new.mkdir()
        _share_like_parent(new)
    if not missing:
        _share_like_parent(path)


def _share_like_parent(folder: Path) -> None:
    try:
        parent = os.stat(folder.parent)
        mine = os.stat(folder)
    except OSError:
        return
    if not parent.st_mode & stat.S_IWGRP or mine.st_uid != os.geteuid():
        return
    wanted = mine.st_mode | stat.S_IRWXG | (parent.st_mode & stat.S_ISGID)
    if stat.S_IMODE(wanted) != stat.S_IMODE(mine.st_mode):
        with contextlib.suppress(OSError):
            os.chmod(folder, stat.S_IMODE(wanted))


@contextlib.contextmanager
def cache_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive lock ``path`` (filelock), group-writable where its folder is; where the filesystem
    refuses to lock, go on without it (see the module docstring for why the cache stays right)."""
    from filelock import FileLock

    make_folder(path.parent)
    if path.is_symlink():
        path.unlink()
    shared = os.stat(path.parent).st_mode & stat.S_IWGRP
    lock = FileLock(str(path), mode=0o664) if shared else FileLock(str(path))
    try:
        lock.acquire()
    except NotImplementedError:  # filelock < 3.13 on ENOSYS
        held = False
    except OSError as err:
        if err.errno not in REFUSED and not (err.errno in (errno.EACCES, errno.EPERM) and not shared):
            raise
        held = False
    else:
        held = True
    try:
        yield
    finally:
        if held:
            lock.release()


def _host() -> str:
    from kernlock.util.processes import host  # socket and threading: only a download pays for them

    return host()


def _thread() -> int:
    import threading

    return threading.get_ident() % 1_000_000_007


def _token() -> str:
    """``host-pid-thread``: threads of one process download the same blob apart too (two variants may share it)."""
    return f"{_host()}-{os.getpid()}-{_thread()}"


def partial_name(blob: Path) -> Path:
    """This process's partial file for ``blob``."""
    return blob.with_name(f"{blob.name}.{_token()}.incomplete")


def _gone(candidate: Path, blob: Path) -> bool:
    """Whether the partial file ``candidate`` of ``blob`` belongs to no running process."""
    owner = candidate.name[len(blob.name) + 1 : -len(".incomplete")]
    if not owner:  # ``<blob>.incomplete``: an older kernlock's shared partial file
        return True
    rest, _, thread = owner.rpartition("-")
    host, _, pid = rest.rpartition("-")
    if host == _host() and pid.isdigit() and thread.isdigit():
        if int(pid) == os.getpid():
            import threading

            return int(thread) not in {t.ident % 1_000_000_007 for t in threading.enumerate() if t.ident}
        from kernlock.util.processes import started

        return started(int(pid)) is None
    try:
        return time.time() - candidate.stat().st_mtime > _ORPHAN_AFTER
    except OSError:
        return False


def claim_partial(blob: Path) -> Path:
    """This process's partial file for ``blob``, taking over (by rename: one process wins) a partial file whose
    process is gone, so its download resumes; other such leftovers are removed."""
    mine = partial_name(blob)
    if mine.exists() or mine.is_symlink():
        return mine
    for candidate in sorted(blob.parent.glob(f"{blob.name}*.incomplete")):
        if candidate == mine or candidate.is_symlink() or not _gone(candidate, blob):
            continue
        try:
            if not (mine.exists() or mine.is_symlink()):
                os.rename(candidate, mine)
            else:
                candidate.unlink()
        except OSError:
            continue
    return mine
