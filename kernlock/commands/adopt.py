"""`kernlock add --from PATH_OR_REPO`: pin the kernel builds a model was computed with (docs/provenance.md).

A model folder saved by a process kernlock activated carries ``kernels.lock`` (:mod:`kernlock.runtime.provenance`):
a lock in kernels.lock's own schema, read and validated here by the lock reader like any lock. Its kernels (those no
other kernel of the file depends on: kernel dependencies follow their dependents) are added to pyproject.toml pinned
by their commit sha and re-locked, as ``kernlock add org/name@<sha>`` would; the result says, per kernel of the
file, whether the new lock loads the same commit and variant on the environment the model was computed on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernlock.commands import lock as locking
from kernlock.errors import DamagedLockError, JsonLockError, LockError, NotFoundError, ProjectError, SpecError
from kernlock.lock import file as lockfile
from kernlock.lock.model import Lock, LockedKernel
from kernlock.project.inputs import Spec

if TYPE_CHECKING:
    from kernlock.hub.client import Hub

__all__ = ["Adopted", "Outcome", "add_from"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """One kernel of the model's file and what the new lock does with it on the model's environment."""

    entry: LockedKernel  # as the model's kernels.lock records it (its variant: the one the model was computed with)
    environment: str
    commit: str | None  # what the new lock loads there (None: the project does not target that environment)
    variant: str | None

    @property
    def same(self) -> bool:
        return self.commit == self.entry.commit and self.variant in {v.name for v in self.entry.variants}


@dataclass(frozen=True, slots=True, kw_only=True)
class Adopted:
    """What `add --from` read (``source``: the folder, file or ``org/model[@rev]``), and the `add` it made."""

    source: str
    carried: Lock
    added: locking.AddResult
    outcomes: tuple[Outcome, ...]


def add_from(root: Path | None, source: str, trust: bool = False, hub: Hub | None = None) -> Adopted:
    """Pin the commits of the kernels.lock that ``source`` carries (a local model folder, the file itself, or a Hub
    model repo ``org/name[@rev]``) in pyproject.toml and kernels.lock, then re-lock (see the module)."""
    text, where = _read_source(source, hub)
    try:
        carried = lockfile.loads(text, where, canonical=False)
    except JsonLockError:
        raise ProjectError(
            f"{where} is the kernels library's own lock, not one kernlock wrote into a model folder",
            fix="use `kernlock import` for a project that uses it",
        ) from None
    except DamagedLockError as err:
        raise ProjectError(f"{where} is not a kernels.lock kernlock can read", why=err.why) from None
    except LockError as err:
        raise ProjectError(f"{where}: {err}") from None
    if not carried.kernels:
        raise ProjectError(f"{where} records no kernel: the model was saved by a process that loaded none.")
    repos = {entry.repo for entry in carried.kernels}
    roots = [entry for entry in carried.kernels if not set(entry.required_by) & repos]
    specs = [f"{entry.repo}@{entry.commit}" for entry in roots]
    result = locking.add(root, specs, trust=trust, hub=hub)
    outcomes = []
    for entry in carried.kernels:
        for environment in entry.environments:
            mine = result.lock.lock.entry_for(entry.repo, environment)
            variant = mine.variant_for(environment) if mine is not None else None
            outcomes.append(
                Outcome(
                    entry=entry,
                    environment=environment,
                    commit=mine.commit if mine is not None else None,
                    variant=variant.name if variant is not None else None,
                )
            )
    return Adopted(source=where, carried=carried, added=result, outcomes=tuple(outcomes))


def _read_source(source: str, hub: Hub | None) -> tuple[str, str]:
    """The text of the kernels.lock ``source`` names, and how to name it in messages: a local folder (or file)
    first, else a Hub model repo ``org/name[@rev]``."""
    path = Path(source).expanduser()
    if path.is_dir():
        path = path / lockfile.LOCK_NAME
        if not path.is_file():
            raise ProjectError(
                f"{source} has no {lockfile.LOCK_NAME}",
                why="a model folder carries one when a process kernlock activated saved it (docs/provenance.md)",
            )
    if path.is_file():
        return lockfile.read_text(path, lockfile.FOREIGN_MAX), str(path)
    try:
        spec = Spec.parse(source)
    except SpecError:
        raise ProjectError(
            f"--from {source}: no such folder or file, and not a Hub model repo (org/name or org/name@rev)."
        ) from None
    from kernlock.hub.models import read_model_file

    try:
        data = read_model_file(locking.hub_client(hub), spec.repo, lockfile.LOCK_NAME, lockfile.FOREIGN_MAX, spec.rev)
    except NotFoundError as err:
        raise NotFoundError(
            f"{err} A model carries {lockfile.LOCK_NAME} when a process kernlock activated saved it "
            "(docs/provenance.md)."
        ) from None
    try:
        return data.decode("utf-8"), f"{spec.repo}{'@' + spec.rev if spec.rev else ''} ({lockfile.LOCK_NAME})"
    except UnicodeDecodeError:
        raise ProjectError(f"{lockfile.LOCK_NAME} of the model repo {spec.repo} is not UTF-8 text.") from None
