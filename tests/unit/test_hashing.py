"""The lock's two hash kinds, computed while a file is written (threaded or not, resumed or not), equal the hash of
the file read back: what lets sync verify a download without a second pass."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernlock.sync.cache import file_hash
from kernlock.util.hashing import StreamHash


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
