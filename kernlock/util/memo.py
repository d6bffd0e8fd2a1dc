"""Answers kernlock remembers against the identity of every file they were derived from.

Some answers cost far more to derive than to check: whether kernels.lock matches pyproject.toml (parse and validate
both), whether this machine's locked files are all in the cache (the lock model, then a ``stat`` per file), what the
installed transformers/kernels pair allows (every installed distribution's metadata). Each is a function of a few
files, the interpreter and the environment variables kernlock reads. :func:`remember` keeps such an answer in
kernlock's cache beside the identity of each file (size, modification and change times in ns, inode: any write
changes one, and only the owner of a file or root can set its change time); :func:`recall` gives it back only
while every one of those files is as it was, else None, and the caller derives the answer again.

The key of an answer names the interpreter, its ``sys.path`` and every environment variable that moves a cache,
the trusted root or the offline switch (``HF_HOME``, ``KERNELS_CACHE``, ...); :func:`installed` names the
``sys.path`` folders as files, so installing or removing any distribution (torch, kernels, a plugin) is a change.
Only a cache that is the user's alone keeps answers (:func:`kernlock.util.hfenv.private`, docs/security.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kernlock._version import __version__
from kernlock.util import hfenv
from kernlock.util.digest import sha256_hex

__all__ = ["Identity", "identities", "identity", "installed", "recall", "remember"]

_VERSION = 1
_MAX = 16 * 1024 * 1024  # an answer's file: its answer and the identities of the files it read
#: What moves the caches, the offline switch or the trusted root (the answers' files are named in them).
_VARIABLES = (
    *("HOME", "XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE"),
    *("KERNELS_CACHE", "KERNLOCK_CACHE", "KERNLOCK_SIGSTORE_TRUSTED_ROOT"),
)

#: A file's identity: [size, mtime ns, ctime ns, inode] of ``lstat``, or None for a path where nothing is.
Identity = list[int] | None


def identity(path: str) -> Identity:
    """``path``'s identity (``lstat``: a symlink is itself, its target is a path of its own)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def identities(paths: Iterable[str]) -> dict[str, Identity]:
    """The identity of each path."""
    return {path: identity(path) for path in paths}


def installed() -> list[str]:
    """The folders of ``sys.path`` that hold installed distributions (the first, the script's or current folder,
    holds none): an install or uninstall adds or removes a ``.dist-info`` folder in one, which changes its identity.
    """
    return [os.path.abspath(entry or ".") for entry in sys.path[1:]]


def recall(kind: str, key: Iterable[str]) -> Any:
    """The answer remembered for ``kind`` and ``key`` while every file it came from is unchanged, else None."""
    if not hfenv.private(_folder()):
        return None
    text = _key(kind, key)
    raw = hfenv.read_private(_file(kind, text), _MAX)  # an answer others could have written is none
    if raw is None:
        return None
    try:
        kept = json.loads(raw)
        if kept["version"] != _VERSION or kept["kernlock"] != __version__ or kept["key"] != text:
            return None
        files: dict[str, Identity] = kept["files"]
        return kept["answer"] if all(identity(path) == known for path, known in files.items()) else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def remember(kind: str, key: Iterable[str], files: dict[str, Identity], answer: Any) -> None:
    """Keep ``answer`` (JSON) for ``kind`` and ``key``, derived from ``files`` with these identities (taken before
    they were read, so a file changed while the answer was derived no longer matches). Nothing is kept where the
    cache is not the user's alone or cannot be written: the answer is derived again next time."""
    if not hfenv.private(_folder(), create=True):
        return
    text = _key(kind, key)
    from kernlock.util.atomic import write_text_atomic

    kept = {"version": _VERSION, "kernlock": __version__, "key": text, "files": files, "answer": answer}
    with contextlib.suppress(OSError):  # not fsync'd: a file a crash tore fails to parse, and is derived again
        write_text_atomic(_file(kind, text), json.dumps(kept), durable=False, private=True)


def _folder() -> Path:
    return hfenv.cache_root() / "answers"


def _file(kind: str, text: str) -> Path:
    """Where the answer of ``kind`` under the full key ``text`` is kept (the key itself is inside, checked)."""
    return _folder() / f"{kind}-{sha256_hex(text.encode())[:24]}.json"


def _key(kind: str, key: Iterable[str]) -> str:
    variables = [f"{name}={os.environ.get(name)}" for name in _VARIABLES]
    return "\0".join([kind, sys.executable, *sys.path[1:], *variables, "", *key])
