"""`kernlock lock`, `add` and `remove`: bring kernels.lock up to date with pyproject.toml (asking the Hub only
when the lock must move), and record or drop requirements."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kernlock.commands import unchanged
from kernlock.environments.environment import Environment, detect
from kernlock.errors import (
    DamagedLockError,
    DuplicateSpecError,
    JsonLockError,
    LockError,
    NoEnvironmentError,
    ProjectError,
    ResolutionError,
)
from kernlock.lock import file as lockfile
from kernlock.lock import interop
from kernlock.lock.model import Lock
from kernlock.lock.schema import LOCK_VERSION, RECORDS
from kernlock.project import inputs as projects
from kernlock.project.inputs import Pin, Project, Requirement, Spec, Upgrade
from kernlock.util import interrupt
from kernlock.util.atomic import write_text_atomic
from kernlock.variants.grammar import RULE

if TYPE_CHECKING:  # kernlock.hub.client imports huggingface_hub and httpx: only a command that makes a request does
    from kernlock.hub.client import Hub
    from kernlock.resolve.repair import Repair, Salvage

__all__ = [
    "AddResult",
    "LockResult",
    "add",
    "hub_client",
    "lock",
    "lock_project",
    "read_lock",
    "refuse_json_lock",
    "remove",
    "stale_reason",
    "target_environments",
]


def hub_client(hub: Hub | None) -> Hub:
    """``hub``, else a new client for $HF_ENDPOINT (importing the network stack now)."""
    if hub is not None:
        return hub
    from kernlock.hub.client import Hub

    return Hub()


def target_environments(project: Project) -> list[Environment]:
    """The environments declared in [tool.kernlock], else this machine (a machine without torch has none: it locks
    only for declared environments)."""
    if project.environments:
        return list(project.environments)
    try:
        return [detect()]
    except NoEnvironmentError as err:
        raise NoEnvironmentError(
            "torch is not installed, so this machine has no environment of its own to lock for",
            fix="declare where training runs in pyproject.toml, e.g. "
            '`environments = ["torch213-cxx11-cpu-x86_64-linux"]` under [tool.kernlock] '
            "(`kernlock env` prints a machine's string), or install torch",
        ) from err


def stale_reason(project: Project, lock: Lock, environments: list[Environment]) -> str | None:
    """Why ``lock`` does not match the project (None when it does); asks no Hub.

    Besides the requirements' digest, every direct entry must satisfy pyproject: the repo set, each environment's
    revision (``when`` pins included), a pinned sha's commit, and the environments.
    """
    if lock.requires_hash != project.requires_hash():
        return "[tool.kernlock] in pyproject.toml changed since kernels.lock was written"
    if lock.variant_rule != RULE:
        return f"kernels.lock chose its variants by the {lock.variant_rule} loader rule; this kernlock follows {RULE}"
    wanted = sorted(str(e) for e in environments)
    if sorted(lock.environments) != wanted:
        return f"kernels.lock covers {', '.join(lock.environments)}, but the project targets {', '.join(wanted)}"
    for repo in sorted(project.requirements):
        for env in filter(project.requirements[repo].applies_to, environments):
            pin = project.requirements[repo].pin_for(env)
            entry = lock.entry_for(repo, str(env))
            if entry is None:
                return f"kernels.lock has no entry for {repo} on {env}"
            if entry.requested != pin.rev:
                return f"kernels.lock locks {repo} at {entry.requested!r} on {env}; pyproject.toml asks for {pin.rev!r}"
            if len(pin.rev) == 40 and entry.commit != pin.rev.lower():
                return (
                    f"kernels.lock locks {repo} to commit {entry.commit[:12]}, but pyproject.toml pins {pin.rev[:12]}"
                )
    for entry in lock.kernels:
        if entry.repo in project.requirements:
            continue
        if not entry.required_by:
            return f"kernels.lock locks {entry.repo}, which pyproject.toml does not ask for"
        orphaned = [repo for repo in entry.required_by if not lock.entries(repo)]
        if orphaned:
            return f"kernels.lock locks {entry.repo} for {', '.join(orphaned)}, which it does not lock"
    return None


def read_lock(project: Project) -> Lock:
    """The project's lock, validated (a missing pyproject.toml is named first)."""
    if not project.pyproject.exists():
        raise ProjectError(
            f"no pyproject.toml in {project.root}",
            fix="create one with `kernlock add org/name`, or point --project at the project folder",
        )
    refuse_json_lock(project)
    return lockfile.read(project.lockfile)


@dataclass(frozen=True, slots=True, kw_only=True)
class LockResult:
    """What `lock` did: the lock now in force, whether (and why) it was written, and what it replaced."""

    lock: Lock
    written: bool
    reason: str | None  # why it was (re)written, or None if it was up to date
    previous: Lock | None = None  # the lock it replaced (or would replace, with ``dry_run``), if it was readable
    repaired: Repair | None = None  # what was kept and changed of a lock that failed its checks


def lock(
    root: Path | None = None,
    upgrade: Upgrade | None = None,
    check: bool = False,
    hub: Hub | None = None,
    dry_run: bool = False,
) -> LockResult:
    """Bring kernels.lock up to date with pyproject (or, with ``check``, only tell whether it is).

    ``root``: the project folder; None finds the nearest enclosing project (as every function here does).
    ``dry_run``: resolve as `lock` would, but write nothing (``written`` then says whether it would write).
    """
    interrupt.reset()
    where = projects.locate(root)
    files = unchanged.project_files(where) if check else {}
    result = lock_project(projects.load(where), upgrade or Upgrade(), check=check, hub=hub, dry_run=dry_run)
    if check:
        unchanged.remember_lock_check(where, files)  # the next check of the same files answers from this
    return result


def lock_project(
    project: Project,
    upgrade: Upgrade,
    *,
    check: bool = False,
    hub: Hub | None = None,
    dry_run: bool = False,
    repair: bool = True,
) -> LockResult:
    """Bring the loaded ``project``'s lock up to date (see :func:`lock`).

    A lock that fails its checks is refused with ``check`` or without ``repair`` (`sync`); else it is repaired,
    keeping every pin that can still be read (:mod:`kernlock.resolve.repair`).
    """
    if not project.pyproject.exists():
        raise ProjectError(
            f"no pyproject.toml in {project.root}",
            fix="`kernlock add org/name` creates one, or point --project at the project folder",
        )
    refuse_json_lock(project)
    for name in upgrade.kernels:
        if name not in project.requirements:
            raise ProjectError(f"--upgrade-kernel {name}: not a requirement in [tool.kernlock.kernels].")
    environments = target_environments(project)
    previous = None
    salvaged = None
    reason: str | None = "no kernels.lock yet"
    if project.lockfile.exists():
        try:
            previous = lockfile.read(project.lockfile)  # pyproject and a foreign lock were checked above
            reason = stale_reason(project, previous, environments)
        except JsonLockError:
            raise
        except LockError as err:
            if check or (isinstance(err, DamagedLockError) and not repair):
                raise
            hub = hub_client(hub)
            previous, salvaged, reason = _previous_pins(project, hub, repair)
    if reason is None and previous is not None and previous.version != LOCK_VERSION and not check:
        reason = (
            f"kernels.lock is lock-version {previous.version}; it is rewritten as lock-version {LOCK_VERSION}, which "
            f"records {RECORDS[LOCK_VERSION]} (pins kept)"
        )
    if check:
        if reason is not None:
            raise LockError("kernels.lock is stale", why=reason, fix="run `kernlock lock` and commit the result")
        assert previous is not None
        return LockResult(lock=previous, written=False, reason=None)
    if reason is None and not upgrade.all and not upgrade.kernels:
        assert previous is not None
        return LockResult(lock=previous, written=False, reason=None)
    from kernlock.resolve.resolver import resolve  # the resolver (and with it the Hub client) only when the lock moves

    hub = hub_client(hub)
    new = resolve(project, environments, hub, salvaged or previous, upgrade)
    written = _write_if_changed(project, new, dry_run)
    return LockResult(
        lock=new,
        written=written,
        reason=(reason or "upgrade") if written else None,
        previous=previous,
        repaired=_report(salvaged, new, project),
    )


def _previous_pins(project: Project, hub: Hub, repair: bool = True) -> tuple[Lock | None, Salvage | None, str]:
    """The pins of a lock that failed the strict read, and why it is rewritten: an older lock-version or a
    re-formatted file whose content-hash holds (every pin kept), else, with ``repair``, what can still be read of a
    lock that fails its checks (a DamagedLockError without). Another lock-version is refused (LockError)."""
    try:
        pins = lockfile.read_pins(project.lockfile)
        return pins, None, "kernels.lock is rewritten in the current format (pins kept)"
    except DamagedLockError as err:
        if not repair:
            raise
        from kernlock.resolve import repair as repairs

        why = err.why or str(err)
        found = repairs.salvage(lockfile.read_text(project.lockfile), why, hub)
        return None, found, f"kernels.lock failed its checks: {why}"


def _report(salvaged: Salvage | None, new: Lock, project: Project) -> Repair | None:
    if salvaged is None:
        return None
    from kernlock.resolve import repair as repairs

    return repairs.report(salvaged, new, project)


def _relock_pins(project: Project, hub: Hub) -> tuple[Lock | None, Salvage | None]:
    """What `add` and `remove` keep of the project's lock: its pins, or what can be read of a damaged one."""
    if not project.lockfile.exists():
        return None, None
    previous, salvaged, _ = _previous_pins(project, hub)
    return previous, salvaged


def _write_if_changed(project: Project, new: Lock, dry_run: bool = False) -> bool:
    """Write ``new`` atomically unless kernels.lock already holds exactly its bytes; True when written (with
    ``dry_run``: when it would be written; nothing is)."""
    text = lockfile.dumps(new)
    try:
        if project.lockfile.read_bytes() == text.encode():
            return False
    except OSError:
        pass  # no lock yet (or unreadable): write it
    if not dry_run:
        write_text_atomic(project.lockfile, text)
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class AddResult:
    """What `add` recorded in pyproject.toml, and the lock it wrote."""

    added: dict[str, str]  # repo -> recorded revision
    lock: LockResult
    created: Path | None = None  # the pyproject.toml `add` created (no enclosing project was found)
    replaced: dict[str, str] = field(default_factory=dict)  # repo -> what pyproject asked for before, in TOML


def add(root: Path | None, specs: list[str], trust: bool = False, hub: Hub | None = None) -> AddResult:
    """Record ``specs`` in pyproject and re-lock; nothing is written unless the whole resolution succeeds.

    With no ``root`` and no enclosing project, the project is created in the current folder (``created``).
    """
    from kernlock.resolve import nobuild
    from kernlock.resolve.resolver import resolve
    from kernlock.resolve.versions import latest_version

    interrupt.reset()
    parsed = [Spec.parse(text) for text in specs]
    repos = [spec.repo.casefold() for spec in parsed]
    twice = sorted({spec.repo for spec in parsed if repos.count(spec.repo.casefold()) > 1})
    if twice:
        raise DuplicateSpecError(
            f"{', '.join(twice)} is given more than once", fix="name each kernel once (org/name[@rev])"
        )
    found = projects.locate(root) if root is not None else projects.find_root()
    project = projects.load(found or Path.cwd())
    refuse_json_lock(project)
    hub = hub_client(hub)
    environments = target_environments(project)
    added: dict[str, str] = {}
    replaced: dict[str, str] = {}
    requirements = dict(project.requirements)
    revs: dict[str, str] = {}
    failed: list[ResolutionError] = []
    for spec in parsed:  # every kernel with no version that builds everywhere is named, each with its fix
        try:
            revs[spec.repo] = spec.rev or latest_version(hub, spec.repo, environments)
        except ResolutionError as err:
            failed.append(err)
    if failed:
        raise nobuild.together(failed)
    for spec in parsed:
        rev = revs[spec.repo]
        same = [repo for repo in requirements if repo.casefold() == spec.repo.casefold()]
        old = requirements.pop(same[0]) if same else None  # repo ids are not case-sensitive: one entry
        trusted = trust or bool(old and old.trust)
        requirements[spec.repo] = Requirement(repo=spec.repo, pins=(Pin(rev=rev),), trust=trusted)
        added[spec.repo] = rev
        if old is not None:
            replaced[spec.repo] = _as_toml(old)
    candidate = replace(project, requirements=requirements)
    previous, salvaged = _relock_pins(project, hub)
    new = resolve(candidate, environments, hub, salvaged or previous)
    created = not project.pyproject.exists()
    from kernlock.project import edit as pyproject_edit

    pyproject_edit.set_requirements(project, {repo: (rev, requirements[repo].trust) for repo, rev in added.items()})
    written = _write_if_changed(project, new)
    new_repos = [repo for repo in added if repo not in replaced]
    reason = "; ".join(
        f"{verb} {', '.join(repos)}" for verb, repos in (("added", new_repos), ("changed", list(replaced))) if repos
    )
    return AddResult(
        added=added,
        lock=LockResult(lock=new, written=written, reason=reason, repaired=_report(salvaged, new, candidate)),
        created=project.pyproject if created else None,
        replaced=replaced,
    )


def _as_toml(requirement: Requirement) -> str:
    """A requirement's value as pyproject writes it: ``"v1"``, or its list of ``{ rev, when }`` entries."""
    import json

    if len(requirement.pins) == 1 and requirement.pins[0].when is None:
        return json.dumps(requirement.pins[0].rev)
    entries = (", ".join(f"{k} = {json.dumps(v)}" for k, v in pin.as_data().items()) for pin in requirement.pins)
    return "[" + ", ".join(f"{{ {entry} }}" for entry in entries) + "]"


def remove(root: Path | None, names: list[str], hub: Hub | None = None) -> LockResult:
    """Drop requirements (``org/name``, also written ``org/name@rev``) from pyproject and re-lock."""
    from kernlock.resolve.resolver import resolve

    interrupt.reset()
    names = [Spec.parse(name).repo for name in names]
    project = projects.load(projects.locate(root))
    refuse_json_lock(project)
    unknown = [name for name in names if name not in project.requirements]
    if unknown:
        known = ", ".join(sorted(project.requirements)) or "none"
        raise ProjectError(
            f"{', '.join(unknown)} not in [tool.kernlock.kernels] (requirements: {known})",
            fix="`kernlock show` lists them",
        )
    requirements = {k: v for k, v in project.requirements.items() if k not in names}
    candidate = replace(project, requirements=requirements)
    hub = hub_client(hub)
    previous, salvaged = _relock_pins(project, hub)
    new = resolve(candidate, target_environments(project), hub, salvaged or previous)
    from kernlock.project import edit as pyproject_edit

    pyproject_edit.remove_requirements(project, names)
    written = _write_if_changed(project, new)
    return LockResult(
        lock=new, written=written, reason="removed " + ", ".join(names), repaired=_report(salvaged, new, candidate)
    )


def refuse_json_lock(project: Project) -> None:
    """Refuse to work on a project that still uses the kernels library's lock: a JSON kernels.lock (never
    overwritten) or kernels declared in ``[tool.kernels.dependencies]`` (which kernlock would ignore)."""
    lock = project.lockfile
    try:
        text = lock.read_text("utf-8", "replace")
    except OSError:
        text = ""  # no lock (or an unreadable one: reading it names the problem)
    if interop.looks_like_json_lock(text):
        raise interop.json_lock_error(str(lock))
    declared = project.kernels_dependencies
    if declared:
        raise JsonLockError(
            f"{project.pyproject} declares {', '.join(sorted(declared))} in [tool.kernels.dependencies] (the "
            "kernels library's table), which kernlock does not read",
            fix="run `kernlock import` to move them into [tool.kernlock.kernels]",
        )
