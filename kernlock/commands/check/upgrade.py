"""`kernlock check --upgrade`: would the builds `kernlock lock --upgrade` moves to be right, and as fast, here?
(docs/check.md)

1. Resolves what `kernlock lock --upgrade` (``kernels``: `--upgrade-kernel` of each) would lock — or, with ``to``,
   what the lock would be with that one kernel's requirement set to ``to`` (`kernlock add org/name@REV`) — with the
   same resolver, pins and refusals as `lock`. kernels.lock and pyproject.toml are not written.
2. Fetches and verifies the builds it would move this environment to into the cache (`sync`'s code: hashes,
   signatures), nothing else.
3. Runs `kernlock check` (and `--speed`) on the locked builds and on the new ones, each in a fresh process activated
   with its lock — the locked one, or the resolved one written to a temporary folder — so each loads exactly as a
   run would after the upgrade.
4. One verdict per kernel: the cases the new build fails, or ``pass`` and how its speed compares. An upgrade whose
   build fails a case makes the report not ``ok`` (`check` exits 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kernlock.commands.check import regression
from kernlock.commands.check.command import entries_here
from kernlock.commands.check.report import CheckReport
from kernlock.errors import CheckError, ProjectError
from kernlock.lock.model import LockedKernel
from kernlock.project.inputs import Pin, Upgrade

TYPE_CHECKING = False
if TYPE_CHECKING:
    from kernlock.hub.client import Hub

__all__ = ["Build", "Pair", "UpgradeReport", "check_upgrade"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Build:
    """One side of an upgrade: a locked build of this environment."""

    ref: str
    commit: str
    variant: str

    @property
    def label(self) -> str:
        return regression.label(self.ref, self.commit)

    def as_dict(self) -> dict[str, str]:
        return {"ref": self.ref, "commit": self.commit, "variant": self.variant}


@dataclass(frozen=True, slots=True, kw_only=True)
class Pair:
    """One kernel the upgrade moves here: from the locked build to the new one, and the verdict."""

    repo: str
    old: Build
    new: Build
    failed: tuple[str, ...]  # the new build's failing cases, as the verdict names them
    verdict: str

    @property
    def breaks(self) -> bool:
        return bool(self.failed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.repo,
            "locked": self.old.as_dict(),
            "upgrade": self.new.as_dict(),
            "failed": list(self.failed),
            "verdict": self.verdict,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class UpgradeReport:
    environment: str
    device: str
    pairs: tuple[Pair, ...]
    locked: CheckReport | None  # the check of the locked builds of ``pairs`` (None: nothing moves)
    upgraded: CheckReport | None  # the check of the builds the upgrade moves to
    unchanged: tuple[str, ...]  # kernels the upgrade leaves where they are here
    recorded: Path | None = None

    @property
    def ok(self) -> bool:
        return not any(pair.breaks for pair in self.pairs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "device": self.device,
            "ok": self.ok,
            "upgrades": [pair.as_dict() for pair in self.pairs],
            "unchanged": list(self.unchanged),
            "locked": self.locked.as_dict() if self.locked else None,
            "upgraded": self.upgraded.as_dict() if self.upgraded else None,
            "recorded": str(self.recorded) if self.recorded else None,
        }


def check_upgrade(
    root: Path | None = None,
    kernels: list[str] | None = None,
    to: str | None = None,
    dtypes: list[str] | None = None,
    *,
    speed: bool = False,
    seqlens: list[int] | None = None,
    record: bool = False,
    hub: Hub | None = None,
) -> UpgradeReport:
    """See the module; ``kernels``/``to`` as `check --upgrade --kernel NAME [--to REV]`."""
    from kernlock.commands import lock as locking
    from kernlock.commands.check import report as results
    from kernlock.environments.environment import detect
    from kernlock.lock import file as lockfile
    from kernlock.project import inputs as projects
    from kernlock.resolve.resolver import resolve

    project = projects.load(projects.locate(root))
    lock = locking.read_lock(project)
    environment = str(detect())
    entries = entries_here(lock, environment, kernels)
    named = _requirements(project.requirements, kernels or [])
    if to is not None:
        if len(named) != 1:
            raise ProjectError("--to REV goes with exactly one --kernel NAME: the kernel to check at REV.")
        [repo] = named
        requirement = replace(project.requirements[repo], pins=(Pin(rev=to),))
        project = replace(project, requirements={**project.requirements, repo: requirement})
    upgrade = Upgrade(kernels=frozenset(named)) if named else Upgrade(all=True)
    hub = locking.hub_client(hub)
    resolved = resolve(project, locking.target_environments(project), hub, lock, upgrade)
    moves: list[tuple[LockedKernel, LockedKernel]] = []
    unchanged = []
    for entry in entries:
        new = resolved.entry_for(entry.repo, environment)
        old_variant, new_variant = entry.variant_for(environment), new.variant_for(environment) if new else None
        if new is None or new_variant is None or old_variant is None:
            continue  # `lock --upgrade` would refuse it, and resolve said so already
        if (new.commit, new_variant.name) == (entry.commit, old_variant.name):
            unchanged.append(entry.repo)
        else:
            moves.append((entry, new))
    if not moves:
        return UpgradeReport(
            environment=environment, device="-", pairs=(), locked=None, upgraded=None, unchanged=tuple(unchanged)
        )
    _fetch(project, replace(resolved, kernels=tuple(new for _, new in moves)), environment, hub)
    options = {"dtypes": dtypes, "speed": speed, "seqlens": seqlens, "environment": environment}
    locked = _child(project.lockfile, [old.repo for old, _ in moves], options)
    with tempfile.TemporaryDirectory(prefix="kernlock-upgrade-") as folder:
        candidate = Path(folder) / "kernels.lock"
        candidate.write_text(lockfile.dumps(resolved), encoding="utf-8")
        upgraded = _child(candidate, [new.repo for _, new in moves], options)
    pairs = tuple(_pair(old, new, environment, locked, upgraded) for old, new in moves)
    recorded = None
    if record:
        results.write(project.lockfile.parent, locked)
        recorded = results.write(project.lockfile.parent, upgraded)
    return UpgradeReport(
        environment=environment,
        device=upgraded.device,
        pairs=pairs,
        locked=locked,
        upgraded=upgraded,
        unchanged=tuple(unchanged),
        recorded=recorded,
    )


def _requirements(requirements: dict[str, Any], kernels: list[str]) -> list[str]:
    """The requirement names ``kernels`` designate (case does not matter); each must be a direct requirement."""
    by_fold = {repo.casefold(): repo for repo in requirements}
    missing = [name for name in kernels if name.casefold() not in by_fold]
    if missing:
        raise ProjectError(
            f"--kernel {', '.join(missing)}: not a requirement in [tool.kernlock.kernels]",
            fix="name a direct requirement: `--upgrade` moves what `kernlock lock --upgrade-kernel NAME` would (a "
            "kernel dependency moves with the kernel that needs it)",
        )
    return sorted({by_fold[name.casefold()] for name in kernels})


def _fetch(project: Any, moved: Any, environment: str, hub: Hub) -> None:
    """Download and verify the builds the upgrade moves this environment to (into the cache only)."""
    from kernlock.sync import engine as syncing

    trusted_root = project.signatures.trusted_root_path(project.root)
    syncing.sync(moved, [environment], hub=hub, progress=False, trusted_root=trusted_root)


def _child(lockfile: Path, repos: list[str], options: dict[str, Any]) -> CheckReport:
    """`check` of ``repos`` under ``lockfile`` in a fresh process (:mod:`kernlock.commands.check.child`)."""
    with tempfile.TemporaryDirectory(prefix="kernlock-check-") as folder:
        out = Path(folder) / "report.json"
        request = {**options, "lockfile": str(lockfile), "kernels": repos, "out": str(out)}
        command = [sys.executable, "-m", "kernlock.commands.check.child", json.dumps(request)]
        done = subprocess.run(command, env=dict(os.environ), capture_output=True, text=True)
        try:
            answer = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise CheckError(
                f"the check of {lockfile} stopped with status {done.returncode}", why=" | ".join(tail)
            ) from None
    if "error" in answer:
        raise CheckError(answer["error"])
    return CheckReport.from_dict(answer)


def _pair(old: LockedKernel, new: LockedKernel, environment: str, locked: CheckReport, upgraded: CheckReport) -> Pair:
    old_variant, new_variant = old.variant_for(environment), new.variant_for(environment)
    assert old_variant is not None and new_variant is not None
    before = Build(ref=old.ref, commit=old.commit, variant=old_variant.name)
    after = Build(ref=new.ref, commit=new.commit, variant=new_variant.name)
    rows = [row for row in upgraded.rows if row.kernel == new.repo]
    failed = []
    for row in rows:
        if row.verdict != "FAIL":
            continue
        name = row.case.removeprefix("attention ")
        if row.error is not None and row.tolerance is not None:
            failed.append(f"{name} FAIL ({row.error:.2e} > {row.tolerance:.1e})")
        else:
            failed.append(f"{name} FAIL ({row.note or 'did not run'})")
    head = f"{new.repo} {before.label} -> {after.label}: "
    if failed:
        return Pair(repo=new.repo, old=before, new=after, failed=tuple(failed), verdict=head + "; ".join(failed))
    checked = any(row.verdict == "pass" for row in rows)
    verdict = head + ("pass" if checked else "not checked")
    fixed = sum(row.verdict == "FAIL" for row in locked.rows if row.kernel == old.repo)
    if fixed:
        verdict += f" (the locked build fails {fixed} of these cases)"
    found = regression.worst(regression.figures(locked, old.repo), regression.figures(upgraded, new.repo))
    if found is not None:
        verdict += f", {found.describe()}"
    return Pair(repo=new.repo, old=before, new=after, failed=(), verdict=verdict)
