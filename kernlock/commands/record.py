"""`kernlock run --record -- CMD...`: run CMD recording every Hub kernel request, then lock what it asked for.

:func:`prepare` builds CMD's environment: `kernlock run`'s (activation in every Python process, launchers'
ranks included) in warn mode, so that loads of unlocked repos proceed, plus ``KERNLOCK_RECORD`` naming a fresh
record folder (:mod:`kernlock.runtime.records`). A project without a lock yet gets an empty one first (activation needs
a lock). :func:`finish`, once CMD has ended whatever its exit status, gathers the records, adds each unlocked repo
to ``[tool.kernlock.kernels]`` with the revision the code asked for, and re-locks (unless ``dry_run`` or
``no_lock``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernlock.project import inputs as projects

TYPE_CHECKING = False
if TYPE_CHECKING:
    from kernlock.commands.lock import AddResult
    from kernlock.commands.sync import NotSynced
    from kernlock.runtime.records import Gathered
    from kernlock.sync.engine import SyncReport

__all__ = ["Prepared", "RecordResult", "collect", "finish", "prepare"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """CMD's environment, the record folder it writes to, the project, and the empty lock written first (if any)."""

    env: dict[str, str]
    folder: Path
    root: Path
    created_lock: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordResult:
    """What CMD asked for, what was added to pyproject (repo -> revision), repos asked with several revisions,
    and, when re-locked, the lock written and this machine's sync."""

    gathered: Gathered
    added: dict[str, str]
    conflicts: dict[str, list[str]]
    pyproject_before: str
    pyproject_after: str
    locked: AddResult | None = None
    synced: SyncReport | NotSynced | None = None


def prepare(root: Path | None) -> Prepared:
    """CMD's environment for a recorded run of the project at ``root`` (None: the enclosing project)."""
    from kernlock.commands import lock as locking
    from kernlock.runtime import activation as runtime
    from kernlock.runtime import records

    found = projects.locate(root) if root is not None else projects.find_root()
    project = projects.load(found or Path.cwd())
    created = False
    if not project.lockfile.exists():
        locking.lock_project(project, projects.Upgrade())
        created = True
    env, _active = runtime.run_environment(project.lockfile, "warn")
    folder = records.make_folder()
    env["KERNLOCK_RECORD"] = str(folder)
    return Prepared(env=env, folder=folder, root=project.root, created_lock=created)


def collect(prepared: Prepared) -> Gathered:
    """Every request CMD's processes recorded (the record folder is removed)."""
    from kernlock.runtime import records

    try:
        return records.gather(prepared.folder)
    finally:
        records.remove_folder(prepared.folder)


def finish(prepared: Prepared, gathered: Gathered, *, dry_run: bool = False, no_lock: bool = False) -> RecordResult:
    """Add what CMD asked for and the lock lacked to pyproject, and re-lock (see the module)."""
    from kernlock.commands import lock as locking
    from kernlock.project import edit as pyproject_edit
    from kernlock.runtime import records

    project = projects.load(prepared.root)
    adds, conflicts = records.additions(gathered.requests, set(project.requirements))
    before = _text(project.pyproject)
    locked = synced = None
    if adds and not dry_run:
        if no_lock:
            pyproject_edit.set_requirements(project, {repo: (rev, False) for repo, rev in adds.items()})
        else:
            from kernlock.commands import sync as syncing

            locked = locking.add(prepared.root, [f"{repo}@{rev}" for repo, rev in adds.items()])
            synced = syncing.sync_after_add(locked.lock.lock)
    return RecordResult(
        gathered=gathered,
        added=adds,
        conflicts=conflicts,
        pyproject_before=before,
        pyproject_after=_text(project.pyproject),
        locked=locked,
        synced=synced,
    )


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""
