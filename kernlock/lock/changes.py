"""What changes between two locks, as uv prints it: ``Updated org/name v3 4c6adb39 -> 8571d307``; an entry that
keeps its commit says in words which environments it gained or lost, and which revision serves them on the other
side (``Updated org/name v3 250d5d06: no longer locked for ENV (now v2)``).

Entries are matched per repo by the revision they satisfy (``requested``), else by a shared environment (a
requirement moved from ``v3`` to ``v4``); what is left over was added or removed. For each matched entry the
environments it gained or lost and the variants that changed are listed below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernlock.lock import document
from kernlock.lock.model import Lock, LockedKernel, Signature

__all__ = ["SHORT", "Change", "LockDiff", "diff", "moved"]

SHORT = 8


def moved(old: str, new: str) -> tuple[str, str]:
    """Two commits as short as :data:`SHORT` digits, longer where they share those (a hand-edited pin one digit
    from the commit it moves to must not read ``f810c870 -> f810c870``)."""
    width = SHORT
    while old[:width] == new[:width] and width < max(len(old), len(new)):
        width += 1
    return old[:width], new[:width]


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One entry's change: ``kind`` is ``added``, ``removed`` or ``updated``; ``details`` are per environment."""

    kind: str
    repo: str
    old: LockedKernel | None
    new: LockedKernel | None
    details: tuple[str, ...] = ()
    #: Per environment the entry gained or lost: the revision another entry of the repo locks it to on the other
    #: side (before, for one gained; after, for one lost), if any.
    elsewhere: tuple[tuple[str, str], ...] = ()

    def line(self) -> str:
        """The uv-style summary line."""
        if self.old is None:
            assert self.new is not None
            return f"Added {self.repo} {self.new.requested} {self.new.commit[:SHORT]}{_via(self.new)}"
        if self.new is None:
            return f"Removed {self.repo} {self.old.requested} {self.old.commit[:SHORT]}{_via(self.old)}"
        if self.old.requested == self.new.requested and self.old.commit == self.new.commit:
            gained = sorted(set(self.new.environments) - set(self.old.environments))
            lost = sorted(set(self.old.environments) - set(self.new.environments))
            words = "; ".join(
                [*self._in_words("now also locked for", gained, "was"), *self._in_words("no longer locked for", lost)]
            )
            return (
                f"Updated {self.repo} {self.new.requested} {self.new.commit[:SHORT]}"
                f"{': ' + words if words else ' (same commit)'}{_via(self.new)}"
            )
        before, after = moved(self.old.commit, self.new.commit)
        if self.old.requested == self.new.requested:
            return f"Updated {self.repo} {self.new.requested} {before} -> {after}{_via(self.new)}"
        return f"Updated {self.repo} {self.old.requested} {before} -> {self.new.requested} {after}{_via(self.new)}"

    def _in_words(self, what: str, envs: list[str], side: str = "now") -> list[str]:
        """``no longer locked for A, B (now v2)``: the environments, grouped by the revision on the other side."""
        other = dict(self.elsewhere)
        groups: dict[str | None, list[str]] = {}
        for env in envs:
            groups.setdefault(other.get(env), []).append(env)
        return [
            f"{what} {', '.join(group)}" + (f" ({side} {rev})" if rev is not None else "")
            for rev, group in groups.items()
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "change": self.kind,
            "repo": self.repo,
            "old": _summary(self.old),
            "new": _summary(self.new),
            "details": list(self.details),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class LockDiff:
    """Every change from one lock to another; empty when they lock the same things."""

    changes: tuple[Change, ...] = ()
    added_environments: tuple[str, ...] = ()
    removed_environments: tuple[str, ...] = ()
    unchanged: int = 0  # entries that stay exactly as they are

    def __bool__(self) -> bool:
        return bool(self.changes or self.added_environments or self.removed_environments)

    def render(self) -> list[str]:
        """The report, one line each: environments first, then each change and its details (indented)."""
        out = [f"Added environment {env}" for env in self.added_environments]
        out += [f"Removed environment {env}" for env in self.removed_environments]
        for change in self.changes:
            out.append(change.line())
            out += [f"  {detail}" for detail in change.details]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "added_environments": list(self.added_environments),
            "removed_environments": list(self.removed_environments),
            "changes": [change.as_dict() for change in self.changes],
            "unchanged": self.unchanged,
        }


def diff(old: Lock | None, new: Lock) -> LockDiff:
    """The changes that turn ``old`` (None: no lock yet) into ``new``."""
    old_envs = set(old.environments) if old else set()
    changes: list[Change] = []
    unchanged = 0
    old_kernels = list(old.kernels) if old else []
    for repo in sorted({k.repo for k in old_kernels} | {k.repo for k in new.kernels}):
        before = [k for k in old_kernels if k.repo == repo]
        after = [k for k in new.kernels if k.repo == repo]
        for a, b in _pairs(before, after):
            if a is None or b is None:
                changes.append(Change(kind="added" if a is None else "removed", repo=repo, old=a, new=b))
            elif _same(a, b):
                unchanged += 1
            elif (a.requested, a.commit) != (b.requested, b.commit):
                changes.append(Change(kind="updated", repo=repo, old=a, new=b, details=tuple(_details(a, b))))
            else:  # the same pin serving other environments: said in words on its line
                gained = _elsewhere(repo, set(b.environments) - set(a.environments), old_kernels)
                lost = _elsewhere(repo, set(a.environments) - set(b.environments), list(new.kernels))
                details = tuple(_details(a, b, words=True))
                changes.append(
                    Change(kind="updated", repo=repo, old=a, new=b, details=details, elsewhere=gained + lost)
                )
    return LockDiff(
        changes=tuple(changes),
        added_environments=tuple(sorted(set(new.environments) - old_envs)),
        removed_environments=tuple(sorted(old_envs - set(new.environments))) if old else (),
        unchanged=unchanged,
    )


def _pairs(
    before: list[LockedKernel], after: list[LockedKernel]
) -> list[tuple[LockedKernel | None, LockedKernel | None]]:
    """Match entries of one repo: same ``requested`` first, then any shared environment."""
    left = list(before)
    pairs: list[tuple[LockedKernel | None, LockedKernel | None]] = []
    unmatched = []
    for b in after:
        twin = next((a for a in left if a.requested == b.requested), None)
        if twin is None:
            unmatched.append(b)
        else:
            left.remove(twin)
            pairs.append((twin, b))
    for b in unmatched:
        twin = next((a for a in left if set(a.environments) & set(b.environments)), None)
        if twin is not None:
            left.remove(twin)
        pairs.append((twin, b))
    pairs += [(a, None) for a in left]
    return pairs


def _same(a: LockedKernel, b: LockedKernel) -> bool:
    return (a.requested, a.ref, a.commit, a.environments, a.variants) == (
        b.requested,
        b.ref,
        b.commit,
        b.environments,
        b.variants,
    )


def _elsewhere(repo: str, envs: set[str], kernels: list[LockedKernel]) -> tuple[tuple[str, str], ...]:
    """For each of ``envs``: the revision an entry of ``repo`` among ``kernels`` locks it to, where one does."""
    found = []
    for env in sorted(envs):
        other = next((k for k in kernels if k.repo == repo and env in k.environments), None)
        if other is not None:
            found.append((env, other.requested))
    return tuple(found)


def _details(a: LockedKernel, b: LockedKernel, *, words: bool = False) -> list[str]:
    """Per environment: gained (+), lost (-), or loading another variant (~). With ``words`` (the summary line
    already names the environments gained and lost, in words) only the variants that changed."""
    found = []
    for env in sorted(set(a.environments) | set(b.environments)):
        va, vb = a.variant_for(env), b.variant_for(env)
        if words and (va is None) != (vb is None):
            continue
        if va is None and vb is not None:
            found.append(f"+ {env}: {vb.name}")
        elif vb is None and va is not None:
            found.append(f"- {env}: {va.name}")
        elif va is not None and vb is not None and va.name != vb.name:
            found.append(f"~ {env}: {va.name} -> {vb.name}")
    old = {v.name: v.signature for v in a.variants}
    for variant in b.variants:
        if variant.name in old and old[variant.name] != variant.signature:
            before, after = _signer(old[variant.name]), _signer(variant.signature)
            if before != after:  # who signed changed (a new build by the same signer is no news)
                found.append(f"~ {variant.name}: signature {before} -> {after}")
    return found


def _signer(signature: Signature | str | None) -> str:
    """A variant's signature in a few words (the build signer URI when signed)."""
    if isinstance(signature, Signature):
        return f"signed by {signature.signer}"
    return "not recorded" if signature is None else signature


def _via(entry: LockedKernel) -> str:
    return f" (dependency of {', '.join(entry.required_by)})" if entry.required_by else ""


def _summary(entry: LockedKernel | None) -> dict[str, Any] | None:
    return None if entry is None else document.entry_view(entry)
