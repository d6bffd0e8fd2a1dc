"""One rule for a lock that did not come from this project (docs/lockfile.md, "A lock from elsewhere"): the
kernels.lock of a model folder or a checkpoint (compared on load, `add --from`), of a Hub model repo, and the kernels
library's JSON lock (`import`) are read only up to ``lockfile.FOREIGN_MAX`` bytes; a larger one is refused in one
line naming the fix, and no more than that is read. A project's own lock is read at any size.

Each lock here is valid: the golden lock padded with a comment line (its content-hash recomputed), which every
reader that does not compare the bytes (a lock from elsewhere is not) reads as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import assert_clean_error, run_cli
from projects import CPU_ENV, write_pyproject
from test_lock_golden import CURRENT, golden, rehash

from kernlock.errors import LockError
from kernlock.lock import file as lockfile
from kernlock.lock.index import LockView
from kernlock.runtime import policy, provenance
from kernlock.testing import Catalog, HubServer

LIMIT = lockfile.FOREIGN_MAX
OVER = f"over {LIMIT >> 20} MiB"


def padded(size: int) -> str:
    """The golden lock, valid, padded with a comment line to ``size`` bytes."""
    text = golden(CURRENT)
    return rehash(text + "#" * (size - len(text.encode()) - 1) + "\n")


def model_folder(tmp_path: Path, size: int) -> Path:
    folder = tmp_path / "checkpoint-2"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "kernels.lock").write_text(padded(size))
    assert (folder / "kernels.lock").stat().st_size == size
    return folder


def test_a_model_folder_s_lock_is_read_up_to_the_bound_and_refused_past_it(tmp_path: Path) -> None:
    assert lockfile.read_foreign(model_folder(tmp_path / "at", LIMIT) / "kernels.lock").kernels
    with pytest.raises(LockError, match=OVER) as refused:
        lockfile.read_foreign(model_folder(tmp_path / "past", LIMIT + 1) / "kernels.lock")
    assert "\n" not in str(refused.value) and "delete it" in str(refused.value)
    project = tmp_path / "project"
    project.mkdir()
    (project / "kernels.lock").write_text(padded(LIMIT + 1))  # a project's own lock: any size
    assert lockfile.read(project / "kernels.lock", canonical=False).kernels


def test_loading_a_model_compares_no_lock_past_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint's kernels.lock (resume, from_pretrained) is compared with the lock in force only up to the
    bound; past it, one warning names the file, as for any lock it cannot read (it was read whole, silently)."""
    said: list[str] = []
    monkeypatch.setattr(provenance, "enabled", lambda: True)
    monkeypatch.setattr(provenance, "refusal", lambda folder: None)
    monkeypatch.setattr(provenance, "_remembered", lambda: {})
    monkeypatch.setattr(policy, "warn_once", lambda key, message: said.append(message))
    monkeypatch.setattr(policy, "current_lock", lambda: (LockView(CPU_ENV, (CPU_ENV,), [], []), CPU_ENV))
    provenance.compare(model_folder(tmp_path, LIMIT + 1))
    [line] = said
    assert f"cannot compare {tmp_path / 'checkpoint-2' / 'kernels.lock'}" in line and OVER in line


@pytest.mark.subprocess
def test_add_from_a_folder_past_the_bound_is_refused_in_one_line(
    hub: HubServer, user_env: dict[str, str], project: Path, tmp_path: Path
) -> None:
    write_pyproject(project, "", [CPU_ENV])
    before = (project / "pyproject.toml").read_text()
    folder = model_folder(tmp_path, LIMIT + 1)
    result = run_cli("add", "--from", str(folder), "--project", str(project), env=user_env)
    assert_clean_error(result, OVER, str(folder / "kernels.lock"))
    assert (project / "pyproject.toml").read_text() == before and not (project / "kernels.lock").exists()


@pytest.mark.subprocess
def test_import_of_a_json_lock_past_the_bound_is_refused_in_one_line(
    catalog: Catalog, hub: HubServer, user_env: dict[str, str], project: Path
) -> None:
    write_pyproject(project, "", [CPU_ENV])
    v1 = catalog.repo(catalog.activation).head("v1")
    entry = {"dependency": {"repo-id": catalog.activation, "version": 1}, "lock": {"commit": v1}}
    text = json.dumps([entry])
    text = text[:-1] + " " * (LIMIT + 1 - len(text)) + "]"  # valid JSON, one byte over
    (project / "kernels.lock").write_text(text)
    assert_clean_error(run_cli("import", "--project", str(project), env=user_env), OVER)
    assert (project / "kernels.lock").read_text() == text and not (project / "kernels.lock.json").exists()
