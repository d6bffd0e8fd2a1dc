"""A kernels.lock that failed its checks, read back as far as it can be: the pins `kernlock lock` keeps.

Every command that only reads the lock refuses such a file (:func:`kernlock.lock.file.damaged`). `kernlock lock`,
`add` and `remove` keep every pin (repo, requested revision, commit) they can still read (:mod:`kernlock.lock.pins`
reads them). A file with git merge-conflict markers is read as both of its sides. Where pins of one revision differ
(the two sides of a merge, a duplicated entry), the newer commit in the Hub's history of its branch wins; where the
sides lock different revisions, the one pyproject.toml asks for wins. Each choice is said (``chose: ...``).

A pin is kept only where it is on the revision it names: in its branch's history, at its tag's commit (a sha is on
itself). An edited pin can name a commit the Hub has on another branch; such a pin is not kept (the other side of
a merge wins, or the revision is resolved anew and ``Re-resolved`` says why). That costs the repo's refs, and the
branch's history down to the pin when the branch has moved since: only here, never for an intact lock.

The resolver then reads each kept pin's variants and files again from the Hub at that commit (nothing else of the
damaged file is trusted) and resolves anew only what could not be read or was not on its revision; :func:`report`
says, entry by entry, what was kept and what changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernlock.errors import NotFoundError, UnknownRevisionError
from kernlock.lock.changes import SHORT, moved
from kernlock.lock.pins import Pin, read_pins, sides
from kernlock.util import interrupt
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
    off_ref: tuple[Pin, ...] = ()  # pins not on the revision they name, none of their revision's being: resolved anew
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
    one pin chosen per revision (the Hub says which commit is newer, and which pins are on their revision)."""
    both = sides(text)
    pins: list[Pin] = []
    unreadable: list[str] = []
    for label, part in both or (("", text),):
        found, lost = read_pins(part, label)
        pins += found
        unreadable += [line for line in lost if line not in unreadable]
    histories = _Histories.of(pins, hub)
    kept, off_ref, choices = _choose(pins, histories)
    return Salvage(
        why=why,
        pins=tuple(kept),
        unreadable=tuple(unreadable),
        choices=tuple(choices),
        off_ref=tuple(off_ref),
        conflicted=both is not None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Histories:
    """Where the pins of a damaged lock stand on the Hub: the pins that are not on the revision they name, and per
    (repo, branch) the commits of its history listed to tell (newest first), which order two pins of it."""

    hub: Hub
    off: frozenset[Pin]
    listed: dict[tuple[str, str], list[str]]

    @classmethod
    def of(cls, pins: list[Pin], hub: Hub) -> _Histories:
        """Ask the Hub about every pin, one repo per task, the repos in parallel (as the resolver asks)."""
        from kernlock.resolve.resolver import MAX_WORKERS

        by_repo: dict[str, list[Pin]] = {}
        for pin in pins:
            by_repo.setdefault(pin.repo, []).append(pin)
        with interrupt.worker_pool(MAX_WORKERS) as pool:
            answers = list(pool.map(lambda group: _where(group, hub), by_repo.values()))
        off = frozenset(pin for found, _ in answers for pin in found)
        listed = {
            (repo, ref): ids for (_, lists), repo in zip(answers, by_repo, strict=True) for ref, ids in lists.items()
        }
        return cls(hub=hub, off=off, listed=listed)


def _where(pins: list[Pin], hub: Hub) -> tuple[list[Pin], dict[str, list[str]]]:
    """The pins of one repo that are not on the revision they name, and the history listed per branch to tell.

    A pin by sha is on itself; a tag's pin must be its commit; a branch's pin must be in its history (listed from
    its head down to the pin, so a pin at the head costs no listing). A revision the Hub no longer has holds no pin
    (resolving it anew says so). A pin the Hub does not have at all is left to the resolver, which says so."""
    listed: dict[str, list[str]] = {}
    known: dict[tuple[str, str], bool] = {}  # (requested, commit) -> on it: duplicated entries are asked once
    for pin in pins:
        interrupt.check()
        if (pin.requested, pin.commit) not in known:
            known[pin.requested, pin.commit] = _is_on(pin, hub, listed)
    return [pin for pin in pins if not known[pin.requested, pin.commit]], listed


def _is_on(pin: Pin, hub: Hub, listed: dict[str, list[str]]) -> bool:
    """Whether ``pin`` is on the revision it names (see :func:`_where`); ``listed`` keeps the longest history listed
    per branch."""
    if pin.ref == pin.commit:
        return True
    try:
        ref, head = hub.resolve_revision(pin.repo, pin.requested)
    except UnknownRevisionError:
        return False
    except NotFoundError:  # the repo itself: the resolver says so
        return True
    if head == pin.commit:
        return True
    if ref in hub.refs(pin.repo).branches and not pin.requested.startswith("refs/tags/"):
        ids = listed.get(ref, [])
        if pin.commit not in ids:
            ids = [commit for commit, _ in hub.history(pin.repo, head, until=pin.commit)]
            listed[ref] = max(listed.get(ref, []), ids, key=len)
        if pin.commit in ids:
            return True
    try:
        hub.build_tree(pin.repo, pin.commit)  # cached on disk: a commit never changes
    except NotFoundError:
        return True  # not on the Hub at all: kept, for the resolver to say so (an edited pin)
    return False


def _choose(pins: list[Pin], histories: _Histories) -> tuple[list[Pin], list[Pin], list[str]]:
    """One pin per (repo, requested): where they agree, that pin; else the newer commit (a `chose:` line each).
    Pins not on their revision lose to one that is; a revision none of whose pins is on it keeps none (returned
    second: it is resolved anew)."""
    groups: dict[tuple[str, str], list[Pin]] = {}
    for pin in pins:
        groups.setdefault((pin.repo, pin.requested), []).append(pin)
    kept: list[Pin] = []
    off_ref: list[Pin] = []
    choices: list[str] = []
    for (repo, requested), group in groups.items():
        on = [pin for pin in group if pin not in histories.off]
        if not on:
            off_ref += group
            continue
        winner = on[0]
        for other in on[1:]:
            if other.commit == winner.commit:
                if not other.side or other.side == winner.side:  # a duplicated entry, not two sides agreeing
                    choices.append(
                        f"chose: {repo} {requested}: {winner.origin} and {other.origin} lock the same commit "
                        f"{winner.commit[:SHORT]}; kept it once"
                    )
                continue
            newer, why = _newer(histories, winner, other)
            choices.append(_chose(winner, other, newer, why))
            winner = newer
        for other in group:
            if other not in on and other.commit != winner.commit:
                first, second = sorted((winner, other), key=group.index)
                choices.append(_chose(first, second, winner, f"{other.commit[:SHORT]} is not on {other.ref}"))
        kept.append(winner)
    return kept, off_ref, choices


def _chose(a: Pin, b: Pin, kept: Pin, why: str) -> str:
    """The `chose:` line of a choice between pins ``a`` and ``b`` of one revision."""
    return (
        f"chose: {a.repo} {a.requested}: {a.side or a.origin} locks {a.commit[:SHORT]}, {b.side or b.origin} "
        f"{b.commit[:SHORT]}; kept {kept.commit[:SHORT]} ({kept.side or kept.origin}), {why}"
    )


def _newer(histories: _Histories, a: Pin, b: Pin) -> tuple[Pin, str]:
    """The pin of ``a`` and ``b`` (one revision, two commits, both on it) whose commit is newer, and why: its place
    in the Hub's history of the branch, else which descends from the other, else the later commit date."""
    history = histories.listed.get((a.repo, a.ref), [])
    if a.commit in history and b.commit in history:
        first = a if history.index(a.commit) < history.index(b.commit) else b
        return first, f"the newer commit on {a.ref}"
    dates = {}
    for one, other in ((a, b), (b, a)):
        try:
            found = histories.hub.history(one.repo, one.commit, until=other.commit)
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
    read = f"{count(len(found.pins) + len(found.off_ref), 'pin')} could still be read"
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
    pins = found.pins + found.off_ref
    for repo in sorted({pin.repo for pin in pins}):
        by_side: dict[str, list[Pin]] = {}
        for pin in (p for p in pins if p.repo == repo):
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
    """One line per entry: its pin kept (``Repaired``), resolved anew because its pins were not on its revision
    (``Re-resolved``), moved (``Updated``), new (``Added``) or dropped (``Removed``); the pins of a repo in
    ``chosen`` (a `chose:` between revisions) are not listed as moved or removed: that line said it."""
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
    off = list(found.off_ref)
    for entry in list(fresh):
        wrong = [p for p in off if (p.repo, p.requested) == (entry.repo, entry.requested)]
        if wrong:
            off = [p for p in off if p not in wrong]
            fresh.remove(entry)
            lines.append(_re_resolved(entry, wrong))
    pins += off
    for entry in fresh:
        old = next((p for p in pins if p.repo == entry.repo and p.requested == entry.requested), None)
        old = old or next((p for p in pins if p.repo == entry.repo and entry.repo not in chosen), None)
        if old is None:
            lost = [line for line in found.unreadable if f"({entry.repo})" in line]
            note = " (resolved anew: its entry could not be read)" if lost else ""
            lines.append(f"Added {entry.repo} {entry.requested} {entry.commit[:SHORT]}{_via(entry)}{note}")
            continue
        pins.remove(old)
        before, after = moved(old.commit, entry.commit)
        to = after if old.requested == entry.requested else f"{entry.requested} {after}"
        lines.append(f"Updated {entry.repo} {old.requested} {before} -> {to}{_via(entry)}")
    lines += [f"Removed {p.repo} {p.requested} {p.commit[:SHORT]}" for p in pins if p.repo not in chosen]
    return lines


def _re_resolved(entry: LockedKernel, wrong: list[Pin]) -> str:
    """The line of an entry resolved anew because no pin of its revision was on it (an edited lock, most likely;
    or a branch rewritten since)."""
    commits = list(dict.fromkeys(pin.commit for pin in wrong))
    said = f"the pin {commits[0][:SHORT]} is"
    if len(commits) > 1:
        named = [next(f"{c[:SHORT]} ({p.side or p.origin})" for p in wrong if p.commit == c) for c in commits]
        said = f"the pins {', '.join(named[:-1])} and {named[-1]} are"
    return (
        f"Re-resolved {entry.repo} {entry.requested}: {said} not on {wrong[0].ref} (the lock was edited?) -> "
        f"{entry.commit[:SHORT]}{_via(entry)}"
    )


def _key(entry: LockedKernel) -> tuple[str, str, str]:
    return entry.repo, entry.requested, entry.commit


def _via(entry: LockedKernel) -> str:
    return f" (dependency of {', '.join(entry.required_by)})" if entry.required_by else ""
