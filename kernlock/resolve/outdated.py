"""`kernlock outdated`: for each locked kernel, whether its branch or tag moved since locking, the newest version
branch with a build for every environment it is locked for, and what `kernlock lock --upgrade` would change.

Economical by construction: one refs request per repo (the only request when nothing moved, with the lock's own
trees and metadata in kernlock's cache); a commit listing only for a ref that moved; trees only of commits not
seen before. Publisher trust is not asked here (`lock --upgrade` checks it, as every lock does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kernlock.environments.environment import Environment
from kernlock.errors import KernlockError
from kernlock.hub.client import Hub
from kernlock.lock import changes, document
from kernlock.lock.model import Lock, LockedKernel
from kernlock.project.inputs import Project, Upgrade
from kernlock.resolve.resolver import resolve
from kernlock.resolve.versions import Skipped, move_fix, scan_versions

__all__ = ["Moved", "Report", "Row", "report"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Moved:
    """How a locked branch or tag moved: its head now, the commits since the locked one, when."""

    head: str
    commits: int | None  # new commits on top of the locked one; None when the locked commit left the ref
    date: str  # the head commit's date (ISO 8601), "" if the Hub gave none


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One lock entry's report."""

    entry: LockedKernel
    moved: Moved | None  # None: the ref still points at the locked commit (or the entry is pinned by sha)
    gone: bool  # the ref no longer exists on the Hub
    newest: str | None  # newest version branch with a build for every environment of this repo's entries
    upgrade: changes.Change | None  # what `lock --upgrade` would change for this entry
    #: Versions newer than the locked one skipped for lack of builds ("v5 lacks A, B"), newest first, and the pins
    #: that would move it to the newest of them where it builds (to paste into [tool.kernlock.kernels]).
    skipped: tuple[str, ...] = ()
    fix: tuple[str, ...] = ()

    @property
    def pinned(self) -> bool:
        """Pinned by commit sha: nothing can move."""
        return self.entry.ref == self.entry.commit

    @property
    def newer_version(self) -> bool:
        """Whether the entry follows a version branch and ``newest`` is a later one."""
        return 0 <= _version(self.entry.ref) < _version(self.newest)

    @property
    def outdated(self) -> bool:
        return self.moved is not None or self.gone or self.newer_version or self.upgrade is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            **document.entry_view(self.entry),
            "moved": None
            if self.moved is None
            else {"head": self.moved.head, "commits": self.moved.commits, "date": self.moved.date},
            "ref_gone": self.gone,
            "newest_version": self.newest,
            "newer_version": self.newer_version,
            "upgrade": self.upgrade.as_dict() if self.upgrade else None,
            "skipped_versions": list(self.skipped),
            "outdated": self.outdated,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    rows: list[Row]
    upgrade: changes.LockDiff  # the whole of what `kernlock lock --upgrade` would change
    upgrade_error: str | None = None  # why `kernlock lock --upgrade` would fail, if it would
    #: What `kernlock check --record` (or `check --upgrade --record`) recorded for the commits the upgrade moves to:
    #: ``{"repo", "commit", "environment", "device", "result", "failed"}`` per recorded machine.
    checks: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "kernels": [row.as_dict() for row in self.rows],
            "upgrade": self.upgrade.as_dict(),
            "upgrade_error": self.upgrade_error,
            "checks": list(self.checks),
        }


def report(project: Project, lock: Lock, environments: list[Environment], hub: Hub) -> Report:
    """Compare every lock entry with the Hub now (see the module docstring for the requests it makes)."""
    by_name = {str(env): env for env in environments}
    trusted = {repo: replace(req, trust=True) for repo, req in project.requirements.items()}
    error = None
    try:
        upgraded = resolve(replace(project, requirements=trusted), environments, hub, lock, Upgrade(all=True))
        diff = changes.diff(lock, upgraded)
    except KernlockError as err:  # e.g. a moved branch lost the build of an environment: say so, report the rest
        error, diff = str(err), changes.LockDiff()
    per_entry = {(c.old.repo, c.old.requested, c.old.commit): c for c in diff.changes if c.old is not None}
    scans: dict[str, tuple[str | None, list[Skipped], list[Environment]]] = {}
    rows = []
    for entry in lock.kernels:
        if entry.repo not in scans:
            envs = sorted({e for k in lock.entries(entry.repo) for e in k.environments})
            parsed = [by_name.get(e) or Environment.parse(e) for e in envs]
            scans[entry.repo] = (*_scan(hub, entry.repo, parsed), parsed)
        newest, skipped, parsed = scans[entry.repo]
        newer = [s for s in skipped if _version(s.version) > _version(entry.ref)] if _version(entry.ref) >= 0 else []
        requirement = project.requirements.get(entry.repo)
        partial = [s for s in newer if len(s.refused) < len(parsed)]  # the newest with a build somewhere
        single = requirement is not None and len(requirement.pins) == 1  # pinned per environment: the user's own
        fix = move_fix(hub, requirement, partial[0], parsed) if partial and requirement and single else []
        moved, gone = _moved(hub, entry)
        change = per_entry.get((entry.repo, entry.requested, entry.commit))
        rows.append(
            Row(
                entry=entry,
                moved=moved,
                gone=gone,
                newest=newest,
                upgrade=change,
                skipped=tuple(reason for s in newer for reason in s.reasons),
                fix=tuple(fix),
            )
        )
    return Report(rows=rows, upgrade=diff, upgrade_error=error)


def _moved(hub: Hub, entry: LockedKernel) -> tuple[Moved | None, bool]:
    if entry.ref == entry.commit:
        return None, False
    refs = hub.refs(entry.repo)
    head = refs.branches.get(entry.ref, refs.tags.get(entry.ref))
    if head is None:
        return None, True
    if head == entry.commit:
        return None, False
    history = hub.history(entry.repo, head, until=entry.commit)
    ids = [commit for commit, _ in history]
    count = ids.index(entry.commit) if entry.commit in ids else None
    return Moved(head=head, commits=count, date=history[0][1] if history else ""), False


def _scan(hub: Hub, repo: str, environments: list[Environment]) -> tuple[str | None, list[Skipped]]:
    try:
        return scan_versions(hub, repo, environments)
    except KernlockError:  # no stable version branch: nothing newer to report
        return None, []


def _version(ref: str | None) -> int:
    if ref and ref[:1] == "v" and ref[1:].isdigit():
        return int(ref[1:])
    return -1
