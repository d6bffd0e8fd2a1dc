"""The lock's two hash kinds, computed while a file is written (threaded or not, resumed or not), equal the hash of
the file read back: what lets sync verify a download without a second pass."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from kernlock.sync.cache import file_hash
from kernlock.util.hashing import SMALL, StreamHash, hasher


@pytest.mark.parametrize("algorithm", ["sha256", "git-sha1"])
@pytest.mark.parametrize("threaded", [False, True])
def test_a_file_hashed_as_written_and_resumed_equals_its_hash_read_back(
    algorithm: str, threaded: bool, tmp_path: Path
) -> None:
    data = os.urandom(3 << 20) + b"tail"
    path = tmp_path / "file"
    stream = StreamHash(algorithm, len(data), threaded=threaded)
    path.write_bytes(data[:12345])  # what an interrupted download left
    stream.update(b"bytes of an attempt that is started over")
    stream.restart(path, 12345)
    with open(path, "ab") as handle:
        for start in range(12345, len(data), 65536):
            chunk = data[start : start + 65536]
            handle.write(chunk)
            stream.update(chunk)
    assert stream.value() == file_hash(path, algorithm)
    assert stream.value() == file_hash(path, algorithm)  # value() may be asked twice
    stream.close()


@pytest.mark.parametrize("size", [0, 1, SMALL - 1, SMALL, SMALL + 7])
@pytest.mark.parametrize(("algorithm", "reference"), [("sha256", "sha256"), ("sha512", "sha512"), ("git-sha1", "sha1")])
def test_small_and_large_files_hash_alike(size: int, algorithm: str, reference: str, tmp_path: Path) -> None:
    """Below SMALL a file is hashed by the interpreter's built-in module, from it on by OpenSSL's: either way the
    digest is hashlib's (git-sha1: `git hash-object`'s, the sha1 of the blob header and the content)."""
    data = os.urandom(size)
    path = tmp_path / "file"
    path.write_bytes(data)
    prefix = b"blob %d\0" % size if algorithm == "git-sha1" else b""
    expected = hashlib.new(reference, prefix + data).hexdigest()
    digest = hasher(algorithm, size)
    digest.update(data)
    assert digest.hexdigest() == expected
    if algorithm != "sha512":  # the lock's own kinds
        assert file_hash(path, algorithm) == f"{algorithm}:{expected}"


@pytest.mark.parametrize("algorithm", ["sha1", "md5", "blake2b"])
def test_hash_kinds_the_lock_does_not_know_are_refused(algorithm: str) -> None:
    with pytest.raises(ValueError, match="unknown hash algorithm"):
        hasher(algorithm, 10)
