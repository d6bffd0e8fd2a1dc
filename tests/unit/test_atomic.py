"""Atomic writes (kernels.lock, pyproject.toml, receipts, cached Hub answers): the old file or the new one, with the
old file's permissions or what open() gives a new one, and nothing left behind on an error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernlock.util.atomic import write_bytes_atomic, write_text_atomic


@pytest.fixture
def umask() -> Iterator[int]:
    """A known umask for the test (restored after it)."""
    old = os.umask(0o027)
    try:
        yield 0o027
    finally:
        os.umask(old)


def test_a_new_file_gets_what_open_gives_it(tmp_path: Path, umask: int):
    written, opened = tmp_path / "new" / "written.toml", tmp_path / "opened.toml"
    write_text_atomic(written, "a = 1\n")  # its folder is created too
    opened.write_text("a = 1\n")
    assert written.read_text() == "a = 1\n"
    assert written.stat().st_mode & 0o7777 == opened.stat().st_mode & 0o7777 == 0o666 & ~umask


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644, 0o755, 0o2750])
def test_a_replaced_file_keeps_its_mode(tmp_path: Path, umask: int, mode: int):
    path = tmp_path / "kernels.lock"
    path.write_bytes(b"old")
    path.chmod(mode)
    old_inode = path.stat().st_ino
    write_bytes_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    assert path.stat().st_mode & 0o7777 == mode
    assert path.stat().st_ino != old_inode  # replaced by a rename, never rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernels.lock"]


def test_a_symlink_keeps_pointing_at_the_file_it_replaces(tmp_path: Path):
    target = tmp_path / "real" / "pyproject.toml"
    target.parent.mkdir()
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "pyproject.toml"
    link.symlink_to(target)
    write_text_atomic(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n" and target.stat().st_mode & 0o7777 == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["pyproject.toml"]


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary_one(tmp_path: Path):
    path = tmp_path / "receipt.json"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):  # raised by the write, after the temporary file was created
        write_bytes_atomic(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["receipt.json"]
