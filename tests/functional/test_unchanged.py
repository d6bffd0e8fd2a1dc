"""The everyday commands answer from memory while nothing they read has changed, and never past a change.

`lock --check`, a `sync` with nothing to do and `show` remember their answer against the identity of every file
they read (kernlock.commands.unchanged); `verify` remembers what it checks against (never its verdict). Each test
here makes the second, remembered run, then changes one of those inputs the way a user (or an attacker) would, and
checks that the command sees it as if it had never remembered anything. Every command runs as a user runs it: a
fresh `kernlock` process.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from cli import run_cli
from projects import CPU_ENV, write_pyproject

from kernlock import api
from kernlock.util import memo

pytestmark = pytest.mark.subprocess

ACTIVATION = "kernels-community/activation"
EVERYDAY = (
    *(["lock", "--check"], ["sync"], ["sync", "--frozen"], ["sync", "--locked"], ["show"], ["show", "--json"]),
    *(["verify"], ["verify", "--all-environments"]),
)


@pytest.fixture
def synced(user_env: dict[str, str], hub: object, project: Path) -> dict[str, str]:
    """A project locked for this machine and synced here by `kernlock sync`; the environment."""
    write_pyproject(project, f'"{ACTIVATION}" = "v1"\n', [CPU_ENV])
    api.lock(project)
    done = run_cli("sync", env=user_env, cwd=project)
    assert done.returncode == 0, done.stderr
    return user_env


def _run(env: dict[str, str], project: Path, *args: str) -> tuple[int, str, str]:
    done = run_cli(*args, env=env, cwd=project)
    return done.returncode, done.stdout, done.stderr


def _variant_folder(env: dict[str, str], project: Path) -> Path:
    rows = json.loads(run_cli("show", "--json", env=env, cwd=project).stdout)
    return Path(rows[0]["path"])


@pytest.mark.parametrize("args", EVERYDAY)
def test_a_remembered_answer_is_the_answer(args: list[str], synced: dict[str, str], project: Path):
    """Run twice, each command prints the same thing, with the Hub gone (no request either way)."""
    gone = {**synced, "HF_ENDPOINT": "http://127.0.0.1:9"}
    first = _run(gone, project, *args)
    assert first[0] == 0, first[2]
    assert _run(gone, project, *args) == first


def test_sync_after_a_file_changed_in_the_cache_repairs_it(synced: dict[str, str], project: Path):
    """A cache file changed after a remembered no-op sync (same size, one byte) is found and repaired; a removed
    one is downloaded again; `show` says not synced in between."""
    assert "0 downloaded, 1 already verified" in _run(synced, project, "sync")[1]
    folder = _variant_folder(synced, project)
    init = folder / "__init__.py"
    text = init.read_text()
    os.chmod(init.resolve(), 0o644)
    init.resolve().write_text(text.replace("KERNEL_IDENTITY", "KERNEL_IDENTITX", 1))
    shown = json.loads(_run(synced, project, "show", "--json")[1])
    assert shown[0]["synced"] is False
    code, out, err = _run(synced, project, "sync")
    assert code == 0, err
    assert f"repaired {ACTIVATION}" in out and "__init__.py" in out
    assert init.read_text() == text
    assert json.loads(_run(synced, project, "show", "--json")[1])[0]["synced"] is True

    (folder / "_ops.py").unlink()
    code, out, err = _run(synced, project, "sync", "--frozen")
    assert code == 0, err
    assert "1 downloaded" in out and (folder / "_ops.py").is_file()


def test_lock_check_after_pyproject_or_lock_changed(synced: dict[str, str], project: Path):
    """A remembered `lock --check` still fails on an edited pyproject.toml and on a hand-edited lock of the
    same size; restoring the exact bytes makes it pass again."""
    assert _run(synced, project, "lock", "--check")[0] == 0
    pyproject = project / "pyproject.toml"
    original = pyproject.read_text()
    pyproject.write_text(original.replace('"v1"', '"v2"'))
    code, _, err = _run(synced, project, "lock", "--check")
    assert code == 1 and "stale" in err and "kernlock lock" in err
    pyproject.write_text(original)
    assert _run(synced, project, "lock", "--check")[0] == 0

    lock = project / "kernels.lock"
    text = lock.read_text()
    size = text.index("size = ") + len("size = ")  # the first locked file's size: change its first digit
    digit = "2" if text[size] == "1" else "1"
    lock.write_text(text[:size] + digit + text[size + 1 :])  # the same length: only its identity tells
    code, _, err = _run(synced, project, "lock", "--check")
    assert code == 1 and "edited after kernlock wrote it" in err
    code, _, err = _run(synced, project, "sync")
    assert code == 1 and "edited after kernlock wrote it" in err


def test_verify_hashes_every_time_and_reads_a_changed_lock(synced: dict[str, str], project: Path):
    """`verify` answered from its remembered plan still re-hashes every file: one byte changed in the cache is
    found on the run after a clean one. A lock edited by hand (the same length) is read again and refused, as an
    unremembered `verify` refuses it; a plan kept where others can write is not used."""
    assert _run(synced, project, "verify")[0] == 0
    assert _run(synced, project, "verify")[0] == 0  # from the remembered plan
    init = (_variant_folder(synced, project) / "__init__.py").resolve()
    text = init.read_text()
    os.chmod(init, 0o644)
    init.write_text(text.replace("KERNEL_IDENTITY", "KERNEL_IDENTITX", 1))
    code, _, err = _run(synced, project, "verify")
    assert code == 1 and "__init__.py" in err and "mismatch" in err
    init.write_text(text)
    assert _run(synced, project, "verify")[0] == 0

    lock = project / "kernels.lock"
    original = lock.read_text()
    size = original.index("size = ") + len("size = ")
    lock.write_text(original[:size] + ("2" if original[size] == "1" else "1") + original[size + 1 :])
    code, _, err = _run(synced, project, "verify")
    assert code == 1 and "edited after kernlock wrote it" in err
    lock.write_text(original)
    assert _run(synced, project, "verify")[0] == 0

    cache = Path(synced["KERNLOCK_CACHE"])
    for answer in (cache / "answers").glob("verify-*.json"):  # a forged plan: no file is required, none checked
        kept = json.loads(answer.read_text())
        kept["answer"]["kernel"] = []
        answer.write_text(json.dumps(kept))
    os.chmod(init, 0o644)
    init.write_text(text.replace("KERNEL_IDENTITY", "KERNEL_IDENTITX", 1))
    os.chmod(cache, os.stat(cache).st_mode | stat.S_IWGRP | stat.S_IWOTH)
    code, _, err = _run(synced, project, "verify")
    assert code == 1 and "__init__.py" in err and "mismatch" in err


def test_another_cache_is_not_answered_from_this_one(synced: dict[str, str], project: Path, tmp_path: Path):
    """The same project with HF_HUB_CACHE pointing elsewhere syncs into that cache."""
    assert "1 already verified" in _run(synced, project, "sync", "--frozen")[1]
    other = {**synced, "HF_HUB_CACHE": str(tmp_path / "other-cache")}
    code, out, err = _run(other, project, "sync", "--frozen")
    assert code == 0, err
    assert "1 downloaded" in out and str(tmp_path / "other-cache") in out


def test_a_new_torch_on_sys_path_is_a_new_machine(synced: dict[str, str], project: Path, tmp_path: Path):
    """Torch reinstalled for CUDA (here: a torch folder put first on PYTHONPATH): `show` and `sync` detect the new
    environment at once, not the one they remembered."""
    site = tmp_path / "site"
    site.mkdir()
    env = {**synced, "PYTHONPATH": str(site)}
    assert _run(env, project, "show", "--json")[0] == 0
    assert "1 already verified" in _run(env, project, "sync")[1]
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "version.py").write_text("__version__ = '2.13.0+cu130'\ncuda = '13.0'\nhip = None\nxpu = None\n")
    rows = json.loads(_run(env, project, "show", "--json")[1])
    assert rows[0]["environment"] == "torch213-cxx11-cu130-x86_64-linux" and rows[0]["variant"] is None
    code, _, err = _run(env, project, "sync")
    assert code == 1 and "is not an environment of kernels.lock" in err


def test_answers_kept_where_others_can_write_are_never_used(synced: dict[str, str], project: Path):
    """Someone who can write kernlock's cache (made group-writable here) changes a cached file and forges the
    remembered answer to match what is there now: `sync` does not believe it and repairs the file."""
    assert _run(synced, project, "sync")[0] == 0
    blob = (_variant_folder(synced, project) / "_ops.py").resolve()
    os.chmod(blob, 0o644)
    blob.write_text("import os  # changed\n")
    cache = Path(synced["KERNLOCK_CACHE"])
    for answer in (cache / "answers").glob("sync-*.json"):
        kept = json.loads(answer.read_text())
        kept["files"] = {path: memo.identity(path) for path in kept["files"]}
        answer.write_text(json.dumps(kept))
    os.chmod(cache, os.stat(cache).st_mode | stat.S_IWGRP | stat.S_IWOTH)
    code, out, err = _run(synced, project, "sync")
    assert code == 0, err
    assert f"repaired {ACTIVATION}" in out


def test_env_reads_the_installed_versions_again_after_an_upgrade(synced: dict[str, str], project: Path, tmp_path: Path):
    """`kernlock env` remembers installed versions against the sys.path folders: an upgrade (here transformers,
    first on PYTHONPATH, from 9.8.0 to 9.9.0) shows at once."""
    site = tmp_path / "site"
    site.mkdir()
    env = {**synced, "PYTHONPATH": str(site)}

    def install(version: str) -> None:
        for old in site.glob("transformers-*.dist-info"):
            shutil.rmtree(old)
        info = site / f"transformers-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n")

    install("9.8.0")
    for _ in range(2):
        assert json.loads(_run(env, project, "env", "--json")[1])["versions"]["transformers"] == "9.8.0"
    install("9.9.0")
    assert json.loads(_run(env, project, "env", "--json")[1])["versions"]["transformers"] == "9.9.0"
