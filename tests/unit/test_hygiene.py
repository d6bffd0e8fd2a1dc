"""The suite's own home (tests/hygiene.py): this process's HOME, XDG folders and caches are the session's temporary
folder, not the developer's; and the check after the session lists what appeared, changed or went in a home.
tests/system/test_suite_hygiene.py runs the check end to end, in a pytest of its own."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hygiene
import pytest

from kernlock.util import hfenv


def _session_home() -> Path:
    return Path(os.environ[hygiene.SESSION_HOME])


def test_this_process_has_the_sessions_home_and_caches() -> None:
    home, real = _session_home(), Path(os.environ[hygiene.REAL_HOME])
    assert home != real and not home.is_relative_to(real)
    assert Path.home() == home and os.path.expanduser("~") == str(home)
    for name, below in hygiene.FOLDERS.items():
        assert os.environ[name] == str(home / below), name
    assert [name for name in (*hygiene.MOVERS, *hygiene.XDG) if name in os.environ] == []
    from huggingface_hub import constants

    assert hfenv.cache_root() == home / ".cache" / "kernlock"
    for folder in (constants.HF_HOME, constants.HF_HUB_CACHE, constants.HF_TOKEN_PATH, hfenv.hub_cache()):
        assert Path(folder).is_relative_to(home), folder


def test_the_home_was_set_before_anything_read_it() -> None:
    """tests/conftest.py imports hygiene before kernlock, huggingface_hub and the rest (redirect() refuses after)."""
    loaded = list(sys.modules)
    assert [name for name in hygiene.READERS if name in loaded and loaded.index(name) < loaded.index("hygiene")] == []
    assert hygiene.SESSION is not None or os.environ.get("PYTEST_XDIST_WORKER")  # workers inherit the home


def test_kept_tool_folders_are_outside_what_the_check_walks() -> None:
    """What stays on the real home's (pyenv, pip's configuration, uv's downloads) is no folder the check guards."""
    for below in hygiene.KEPT.values():
        assert not any(Path(below).is_relative_to(walked) for walked in hygiene.WALKED), below


def test_the_check_lists_what_appeared_changed_or_went(tmp_path: Path) -> None:
    home = tmp_path / "home"
    answers = home / ".cache" / "kernlock" / "answers"
    answers.mkdir(parents=True)
    (answers / "kept.json").write_text("{}")
    (home / ".bashrc").write_text("")
    (home / ".cache" / "uv" / "wheels").mkdir(parents=True)
    before = hygiene.snapshot(home)
    assert hygiene.changes(before, hygiene.snapshot(home)) == []

    (answers / "installed-1234.json").write_text("{}")  # a test's answer, as the issue found them
    (answers / "kept.json").write_text('{"longer": 1}')
    (home / ".bashrc").unlink()
    (home / ".huggingface").mkdir()
    (home / ".cache" / "huggingface" / "hub").mkdir(parents=True)
    (home / ".cache" / "uv" / "wheels" / "some.whl").write_text("")  # uv's own cache (KEPT): not guarded
    (home / ".local" / "share" / "uv" / "python").mkdir(parents=True)  # nor its interpreters, made meanwhile
    assert hygiene.changes(before, hygiene.snapshot(home)) == [
        f"gone: {home / '.bashrc'}",
        f"new: {home / '.cache' / 'huggingface'}",
        f"new: {home / '.cache' / 'huggingface' / 'hub'}",
        f"new: {answers / 'installed-1234.json'}",
        f"changed: {answers / 'kept.json'}",
        f"new: {home / '.huggingface'}",
        f"new: {home / '.local'}",
        f"new: {home / '.local' / 'share'}",
    ]


@pytest.mark.parametrize("missing", ["", ".cache"])
def test_a_home_without_the_guarded_folders_is_snapshotted(tmp_path: Path, missing: str) -> None:
    (tmp_path / missing).mkdir(exist_ok=True)
    assert hygiene.snapshot(tmp_path / missing / "nowhere") == {}
