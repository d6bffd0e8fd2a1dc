"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_bytes_atomic", "write_text_atomic"]


def _mode_for(path: Path) -> int:
    """The permission bits to give the new file: the old file's, else what a plain open() would give."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, fsync'd, then renamed.

    The file keeps its permissions (a new one gets the umask's), and a symlink keeps pointing where it did: the
    file it points to is the one replaced.
    """
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(path)
    import tempfile  # ~8 ms (shutil, random): only a command that writes pays it

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) atomically."""
    write_bytes_atomic(path, text.encode())
