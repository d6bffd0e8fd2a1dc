"""A kernels.lock that failed its checks, read back as far as it can be: the pins `kernlock lock` keeps.

Every command that only reads the lock refuses such a file (:func:`kernlock.lock.file.damaged`). `kernlock lock`,
`add` and `remove` keep every pin (repo, requested revision, commit) they can still read (:mod:`kernlock.lock.pins`
reads them). A file with git merge-conflict markers is read as both of its sides. Where pins of one revision differ
(the two sides of a merge, a duplicated entry), the newer commit in the Hub's history of its branch wins; where the
sides lock different revisions, the one pyproject.toml asks for wins. Each choice is said (``chose: ...``).

The resolver then reads each kept pin's variants and files again from the Hub at that commit (nothing else of the
damaged file is trusted) and resolves anew only what could not be read; :func:`report` says, entry by entry, what
was kept and what changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernlock.errors import NotFoundError
from kernlock.lock.changes import SHORT
from kernlock.lock.pins import Pin, read_pins, sides
from kernlock.util.wording import count

if TYPE_CHECKING:
    from kernlock.hub.client import Hub
    from kernlock.lock.model import Lock, LockedKernel
    from kernlock.project.inputs import Project

__all__ = ["Repair", "Salvage", "report", "salvage"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Salvage:
    """What `kernlock lock` keeps of a damaged lock: the pins it could read (after its choices) and what it could
    not read. It answers the resolver's question ``entries(repo)`` as a Lock does."""

    why: str  # what failed: "it holds git merge-conflict markers"
    pins: tuple[Pin, ...]
    unreadable: tuple[str, ...] = ()  # "line 30 ([[kernel]] #2): ..." per entry that could not be read
    choices: tuple[str, ...] = ()  # a `chose:` line per choice between pins of one revision
    conflicted: bool = False

    def entries(self, repo: str) -> list[Pin]:
        return [pin for pin in self.pins if pin.repo == repo]


@dataclass(frozen=True, slots=True, kw_only=True)
class Repair:
    """What `kernlock lock` says about a repair: what failed and what it read (``summary``, before it writes), and
    a line per entry of the new lock (``changes``): kept (``Repaired``), ``Added``, ``Updated`` or ``Removed``."""

    summary: tuple[str, ...]
    changes: tuple[str, ...]
    conflicted: bool = False


# -- choosing ----------------------------------------------------------------------------------------------------


def salvage(text: str, why: str, hub: Hub) -> Salvage:
    """The pins of a damaged lock's ``text`` (``why``: what failed), with both sides of a merge conflict read and
    one pin chosen per revision (the Hub says which commit is newer)."""
    both = sides(text)
    pins: list[Pin] = []
    unreadable: list[str] = []
    for label, part in both or (("", text),):
        found, lost = read_pins(part, label)
        pins += found
        unreadable += [line for line in lost if line not in unreadable]
    kept, choices = _choose(pins, hub)
    return Salvage(
        why=why, pins=tuple(kept), unreadable=tuple(unreadable), choices=tuple(choices), conflicted=both is not None
    )


def _choose(pins: list[Pin], hub: Hub) -> tuple[list[Pin], list[str]]:
    """One pin per (repo, requested): where they agree, that pin; else the newer commit (a `chose:` line each)."""
    groups: dict[tuple[str, str], list[Pin]] = {}
    for pin in pins:
        groups.setdefault((pin.repo, pin.requested), []).append(pin)
    kept: list[Pin] = []
    choices: list[str] = []
    for (repo, requested), group in groups.items():
        winner = group[0]
        for other in group[1:]:
            if other.commit == winner.commit:
                if not other.side or other.side == winner.side:  # a duplicated entry, not two sides agreeing
                    choices.append(
                        f"chose: {repo} {requested}: {winner.origin} and {other.origin} lock the same commit "
                        f"{winner.commit[:SHORT]}; kept it once"
                    )
                continue
            newer, why = _newer(hub, winner, other)
            choices.append(
                f"chose: {repo} {requested}: {winner.side or winner.origin} locks {winner.commit[:SHORT]}, "
                f"{other.side or other.origin} {other.commit[:SHORT]}; kept {newer.commit[:SHORT]} "
                f"({newer.side or newer.origin}), {why}"
            )
            winner = newer
        kept.append(winner)
    return kept, choices


def _newer(hub: Hub, a: Pin, b: Pin) -> tuple[Pin, str]:
    """The pin of ``a`` and ``b`` (one revision, two commits) whose commit is newer, and why: its place in the
    Hub's history of the branch, else which descends from the other, else the later commit date."""
    try:
        history = hub.commits(a.repo, a.ref)
    except NotFoundError:
        history = []
    if a.commit in history and b.commit in history:
        first = a if history.index(a.commit) < history.index(b.commit) else b
        return first, f"the newer commit on {a.ref}"
    for one, other in ((a, b), (b, a)):
        if one.commit in history:
            return one, f"the commit on {a.ref} ({other.commit[:SHORT]} is no longer on it)"
    dates = {}
    for one, other in ((a, b), (b, a)):
        try:
            found = hub.history(one.repo, one.commit, until=other.commit)
        except NotFoundError:
            return other, f"{one.commit[:SHORT]} is not on the Hub (the pin may have been edited)"
        if other.commit in [commit for commit, _ in found]:
            return one, f"it descends from {other.commit[:SHORT]}"
        dates[one.commit] = found[0][1] if found else ""
    later = a if dates[a.commit] >= dates[b.commit] else b
    return later, "the later commit"


# -- saying what happened ----------------------------------------------------------------------------------------


def report(found: Salvage, new: Lock, project: Project) -> Repair:
    """What `kernlock lock` says of the repair that made ``new`` from ``found``."""
    summary = [f"kernels.lock failed its checks: {found.why}."]
    read = f"{count(len(found.pins), 'pin')} could still be read"
    if found.unreadable:
        read += f"; {count(len(found.unreadable), 'entry', 'entries')} could not be read (resolved anew):"
    summary.append(read)
    summary += [f"  {line}" for line in found.unreadable]
    summary += found.choices
    chosen = _revision_choices(found, new, project)
    summary += chosen.values()
    changes = _changes(found, new, set(chosen))
    return Repair(summary=tuple(summary), changes=tuple(changes), conflicted=found.conflicted)


def _revision_choices(found: Salvage, new: Lock, project: Project) -> dict[str, str]:
    """Repo -> its `chose:` line, for each repo whose two sides lock different revisions: which one the new lock
    keeps."""
    lines = {}
    for repo in sorted({pin.repo for pin in found.pins}):
        by_side: dict[str, list[Pin]] = {}
        for pin in found.entries(repo):
            if pin.side:
                by_side.setdefault(pin.side, []).append(pin)
        revisions = [{pin.requested for pin in pins} for pins in by_side.values()]
        if len(revisions) < 2 or revisions[0] == revisions[1]:
            continue
        kept = sorted({k.requested for k in new.entries(repo)})
        said = ", ".join(f"{side} {' '.join(_short(p) for p in pins)}" for side, pins in by_side.items())
        asked = "pyproject.toml asks for" if repo in project.requirements else "the lock needs"
        lines[repo] = f"chose: {repo}: {said}; kept {', '.join(kept) or 'none'}, the revision {asked}"
    return lines


def _short(pin: Pin) -> str:
    return f"{pin.requested} {pin.commit[:SHORT]}"


def _changes(found: Salvage, new: Lock, chosen: set[str]) -> list[str]:
    """One line per entry: its pin kept (``Repaired``), moved (``Updated``), new (``Added``) or dropped
    (``Removed``); the pins of a repo in ``chosen`` (a `chose:` between revisions) are not listed as moved or
    removed: that line said it."""
    pins = list(found.pins)
    lines: list[str] = []
    fresh: list[LockedKernel] = []
    for entry in new.kernels:
        pin = next((p for p in pins if (p.repo, p.requested, p.commit) == _key(entry)), None)
        if pin is None:
            fresh.append(entry)
            continue
        pins.remove(pin)
        lines.append(
            f"Repaired {entry.repo} {entry.requested} {entry.commit[:SHORT]}{_via(entry)} (pin kept; its variants "
            "and files read again from the Hub at that commit)"
        )
    for entry in fresh:
        old = next((p for p in pins if p.repo == entry.repo and p.requested == entry.requested), None)
        old = old or next((p for p in pins if p.repo == entry.repo and entry.repo not in chosen), None)
        if old is None:
            lost = [line for line in found.unreadable if f"({entry.repo})" in line]
            note = " (resolved anew: its entry could not be read)" if lost else ""
            lines.append(f"Added {entry.repo} {entry.requested} {entry.commit[:SHORT]}{_via(entry)}{note}")
            continue
        pins.remove(old)
        moved = f"{old.commit[:SHORT]} -> {entry.commit[:SHORT]}"
        if old.requested != entry.requested:
            moved = f"{old.commit[:SHORT]} -> {entry.requested} {entry.commit[:SHORT]}"
        lines.append(f"Updated {entry.repo} {old.requested} {moved}{_via(entry)}")
    lines += [f"Removed {p.repo} {p.requested} {p.commit[:SHORT]}" for p in pins if p.repo not in chosen]
    return lines


def _key(entry: LockedKernel) -> tuple[str, str, str]:
    return entry.repo, entry.requested, entry.commit


def _via(entry: LockedKernel) -> str:
    return f" (dependency of {', '.join(entry.required_by)})" if entry.required_by else ""
