"""A variant folder appears or disappears in one step: loaders (kernlock's and plain kernels') see a locked variant
whole or not at all, whatever stops a sync (Ctrl-C, SIGKILL, a full disk, a refused signature).

A variant is assembled in a staging folder of its repo, at the variant folder's depth so that its relative symlinks
resolve to the same blobs::

    {cache}/kernels--{org}--{name}/.kernlock-staging/<host>-<pid>-<random>/build/<variant>/...

then renamed onto ``snapshots/<commit>/build/<variant>``. What was there before (a variant kernlock is repairing) is
first renamed aside into the same staging folder, then removed with it. A staging folder of a process that is gone
(SIGKILL) is removed by the next sync of that repo on the same host. Nothing in ``.kernlock-staging`` is a snapshot:
no loader looks there.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from kernlock.lock.model import LockedKernel, LockedVariant
from kernlock.sync.cache import under
from kernlock.util import hfenv, processes
from kernlock.util.sharing import make_folder

__all__ = ["STAGING", "discard", "publish", "staging_folder", "withdraw"]

STAGING = ".kernlock-staging"


def _sweep(staging: Path) -> None:
    """Remove the staging folders this host's dead processes left behind."""
    try:
        names = os.listdir(staging)
    except OSError:
        return
    here = processes.host()
    for name in names:
        owner, _, pid = name.rpartition("-")[0].rpartition("-")  # <host>-<pid>-<random>; a host name may hold "-"
        if owner == here and pid.isdigit() and processes.started(int(pid)) is None:
            _remove_tree(staging / name)


def _remove_tree(path: Path) -> None:
    import shutil  # ~5 ms: only a sync that stages pays it

    shutil.rmtree(path, ignore_errors=True)


def staging_folder(entry: LockedKernel, variant: LockedVariant, cache: Path) -> Path:
    """A new, empty folder of this process in which to assemble ``variant``, at the variant folder's depth."""
    staging = under(cache, hfenv.repo_folder(entry.repo), STAGING)
    _sweep(staging)
    folder = under(
        staging, f"{processes.host()}-{os.getpid()}-{os.urandom(4).hex()}", "build", variant.name, cache=cache
    )
    make_folder(folder)
    return folder


def discard(staged: Path) -> None:
    """Remove a staging folder (``staged``: the variant folder in it) and all it holds."""
    _remove_tree(staged.parent.parent)


def publish(staged: Path, dest: Path) -> None:
    """Make ``staged`` the variant folder ``dest`` in one rename; what ``dest`` held is moved aside first (into the
    same staging folder) and removed with it."""
    make_folder(dest.parent)
    aside = staged.parent.parent / "replaced"
    try:
        for _attempt in range(3):
            try:
                os.rename(staged, dest)
                return
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                    raise
            _remove_tree(aside)
            with contextlib.suppress(FileNotFoundError):
                os.rename(dest, aside)  # a file or symlink there is moved aside too, never followed
        raise OSError(errno.EEXIST, "another process keeps re-creating the variant folder", str(dest))
    finally:
        discard(staged)


def withdraw(entry: LockedKernel, variant: LockedVariant, dest: Path, cache: Path) -> None:
    """Make the variant folder ``dest`` disappear in one step (a rename into a staging folder), then remove it."""
    staged = staging_folder(entry, variant, cache)
    aside = staged.parent.parent / "withdrawn"
    try:
        os.rename(dest, aside)
    except FileNotFoundError:
        pass
    finally:
        discard(staged)
