"""Requirements x Environments -> Lock.

Each requirement is split by environment into revisions (`when` pins, first match wins); each revision is
resolved to a commit (kept from the previous lock unless upgraded), each environment gets the variant the
kernels loader would pick there, and the kernel dependencies named in the chosen variants' metadata.json are
resolved the same way, as their own entries. Requests run in parallel, one wave per dependency depth.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kernlock.environments.environment import Environment
from kernlock.errors import KernlockError, NotFoundError, ResolutionError, UnknownRevisionError
from kernlock.lock.file import normalized
from kernlock.lock.model import Lock, LockedFile, LockedKernel, LockedVariant, environment_facts
from kernlock.project.inputs import Project, Requirement, Upgrade
from kernlock.resolve import nobuild
from kernlock.resolve.dependencies import declared_dependencies
from kernlock.resolve.versions import builds_for, read_metadata, refusals, versions_with_builds
from kernlock.util import interrupt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from kernlock.hub.client import Hub
    from kernlock.lock.pins import Pinned, Pins

__all__ = [
    "MAX_WORKERS",
    "locked_variants",
    "resolve",
]


MAX_WORKERS = 16


@dataclass(slots=True, kw_only=True)
class _Task:
    """One revision of one repo, needed on some environments (by the project or by other kernels)."""

    repo: str
    rev: str
    environments: set[Environment] = field(default_factory=set)
    trusted_by_user: bool = False
    required_by: set[str] = field(default_factory=set)
    requirement: Requirement | None = None  # the project's own entry (None for a kernel dependency)


def resolve(
    project: Project,
    environments: list[Environment],
    hub: Hub,
    previous: Pins | None = None,
    upgrade: Upgrade | None = None,
) -> Lock:
    """Resolve every requirement of ``project`` for every environment into a Lock."""
    upgrade = upgrade or Upgrade()
    tasks: dict[tuple[str, str], _Task] = {}
    for req in project.requirements.values():
        for env in filter(req.applies_to, environments):  # `environments` of a scoped requirement
            pin = req.pin_for(env)
            task = tasks.setdefault(
                (req.repo, pin.rev), _Task(repo=req.repo, rev=pin.rev, trusted_by_user=req.trust, requirement=req)
            )
            task.environments.add(env)
    direct = set(tasks)
    trusted = {req.repo: req.trust for req in project.requirements.values()}

    entries: dict[tuple[str, str], LockedKernel] = {}
    pending = list(tasks.values())
    with interrupt.worker_pool(MAX_WORKERS) as pool:
        while pending:
            attempts = list(pool.map(lambda t: _attempt(t, hub, previous, upgrade, environments), pending))
            failed = [attempt for attempt in attempts if isinstance(attempt, ResolutionError)]
            if failed:  # every kernel of this wave that cannot be locked, each with its fix, in one run
                raise nobuild.together(failed)
            results = [attempt for attempt in attempts if not isinstance(attempt, ResolutionError)]
            for task, (entry, _) in zip(pending, results, strict=True):
                entries[(task.repo, task.rev)] = _merge(entries.get((task.repo, task.rev)), entry)
            deps: dict[tuple[str, str], _Task] = {}
            for task, (_, needed) in zip(pending, results, strict=True):
                for dep in needed:
                    # trusted by hand: as a requirement of its own, or through the kernel that needs it
                    dep.trusted_by_user = trusted.get(dep.repo, False) or task.trusted_by_user
                    key = (dep.repo, dep.rev)
                    known = entries.get(key)
                    if known and set(map(str, dep.environments)) <= set(known.environments):
                        if key not in direct:  # `required-by` is only for entries the project did not ask for
                            entries[key] = _add_required_by(known, dep.required_by)
                        continue
                    merged = deps.setdefault(key, dep)
                    if merged is not dep:
                        merged.environments |= dep.environments
                        merged.required_by |= dep.required_by
            pending = list(deps.values())
    kernels = _check_disjoint(list(entries.values()), direct)
    envs = tuple(str(e) for e in environments)
    lock = Lock(
        requires_hash=project.requires_hash(),
        environments=envs,
        kernels=tuple(kernels),
        facts=environment_facts(environments),
    )
    from kernlock.signing.locktime import record_signatures

    return record_signatures(normalized(lock), project, hub)


def locked_variants(
    chosen: dict[Environment, str | None], tree: dict[str, tuple[LockedFile, ...]]
) -> tuple[LockedVariant, ...]:
    """The variants ``chosen`` names (environment -> variant, None: no build), each with the environments that
    load it (in ``chosen``'s order) and its files from the build ``tree``."""
    by_variant: dict[str, list[str]] = {}
    for env, name in chosen.items():
        if name is not None:
            by_variant.setdefault(name, []).append(str(env))
    return tuple(
        LockedVariant(name=name, environments=tuple(envs), files=tree[name]) for name, envs in by_variant.items()
    )


def _attempt(
    task: _Task, hub: Hub, previous: Pins | None, upgrade: Upgrade, everywhere: list[Environment]
) -> tuple[LockedKernel, list[_Task]] | ResolutionError:
    """:func:`_resolve_task`, its ResolutionError returned (so that the others of its wave are still tried)."""
    try:
        return _resolve_task(task, hub, previous, upgrade, everywhere)
    except ResolutionError as err:
        return err


def _resolve_task(
    task: _Task, hub: Hub, previous: Pins | None, upgrade: Upgrade, everywhere: list[Environment]
) -> tuple[LockedKernel, list[_Task]]:
    org = task.repo.split("/")[0]
    if not task.trusted_by_user and not hub.is_trusted(org):  # also for kept pins: `trust` may have been removed
        raise ResolutionError(
            f"{task.repo} is published by '{org}', which the Hub does not mark as a trusted kernel publisher",
            fix=f"review its code, then run `kernlock add {task.repo} --trust`",
        )
    kept = _kept(task, previous, upgrade)
    if kept is not None:
        ref, commit = kept.ref, kept.commit
    else:
        try:
            ref, commit = hub.resolve_revision(task.repo, task.rev)
        except UnknownRevisionError as err:
            known = _unknown_revision(task, hub)
            if known is None:
                raise
            raise known from err
    try:
        tree = hub.build_tree(task.repo, commit)
    except NotFoundError as err:
        if kept is not None and not isinstance(kept, LockedKernel):  # read back from a lock that failed its checks
            raise NotFoundError(
                f"kernels.lock pins {task.repo}@{task.rev} to commit {commit}, which the Hub does not have",
                why="the pin may have been edited by hand",
                fix="Restore the committed lock with `git checkout HEAD -- kernels.lock`, or resolve it anew with "
                f"`kernlock lock --upgrade-kernel {task.repo}`",
            ) from err
        fix = f"move the pin with `kernlock lock --upgrade-kernel {task.repo}`" if kept is not None else None
        raise NotFoundError(f"{task.repo}@{task.rev}: commit {commit} is not on the Hub ({err})", fix=fix) from err
    chosen = {env: env.select_variant(tree) for env in task.environments}
    refused = refusals(hub, task.repo, commit, tree, chosen)
    if refused:
        raise ResolutionError(
            nobuild.message(
                task.repo, task.rev, task.requirement, commit, refused, tree, everywhere, builds_for(hub, task.repo)
            )
        )
    entry = LockedKernel(
        repo=task.repo,
        requested=task.rev,
        ref=ref,
        commit=commit,
        environments=tuple(str(e) for e in task.environments),
        variants=locked_variants(chosen, tree),  # every environment has a build: the refusals were raised above
        required_by=tuple(task.required_by),
    )
    deps = _dependencies(task, commit, chosen, tree, hub)
    return entry, deps


def _kept(task: _Task, previous: Pins | None, upgrade: Upgrade) -> Pinned | None:
    if previous is None or upgrade.allows(task.repo):
        return None
    for entry in previous.entries(task.repo):
        if entry.requested == task.rev:
            return entry
    return None


def _dependencies(
    task: _Task,
    commit: str,
    chosen: dict[Environment, str | None],
    tree: dict[str, tuple[LockedFile, ...]],
    hub: Hub,
) -> list[_Task]:
    """Kernel dependencies declared in the chosen variants' metadata.json, as tasks for their environments."""
    found: dict[tuple[str, str], _Task] = {}
    for name in sorted({v for v in chosen.values() if v}):
        metadata = read_metadata(hub, task.repo, commit, name, tree)
        if metadata is None:
            continue
        envs = {env for env, v in chosen.items() if v == name}
        where = f"{task.repo}@{commit[:12]} build/{name}/metadata.json"
        for repo, rev in declared_dependencies(metadata, where):
            sub = found.setdefault((repo, rev), _Task(repo=repo, rev=rev, required_by={task.repo}))
            sub.environments |= envs
    return list(found.values())


def _unknown_revision(task: _Task, hub: Hub) -> UnknownRevisionError | None:
    """For a revision the repo does not have: the error naming the versions that would work on the task's
    environments (None when they cannot be told)."""
    try:
        refs = hub.refs(task.repo)
        if task.rev in refs.branches or task.rev in refs.tags:
            return None
        usable = versions_with_builds(hub, task.repo, task.environments)
    except KernlockError:
        return None
    others = sorted(set(refs.branches) - {f"v{n}" for n in refs.versions()}) + sorted(refs.tags)
    what = (
        f"{task.repo} has no revision '{task.rev}'; versions with a build for "
        f"{', '.join(sorted(map(str, task.environments)))}: {', '.join(usable) or 'none'}"
    )
    if others:
        what += f"; other branches and tags: {', '.join(others)}"
    if usable:
        return UnknownRevisionError(what, fix=f"Pick one, e.g. `kernlock add {task.repo}@{usable[-1]}`")
    return UnknownRevisionError(what, fix="Declare other environments, or ask the kernel's publisher for a build")


def _merge(old: LockedKernel | None, new: LockedKernel) -> LockedKernel:
    """One entry for the same repo and revision resolved twice (for more environments)."""
    if old is None:
        return new
    variants = {v.name: v for v in old.variants}
    for v in new.variants:
        known = variants.get(v.name)
        envs = tuple(sorted(set(v.environments) | set(known.environments if known else ())))
        variants[v.name] = replace(v, environments=envs)
    return replace(
        new,
        environments=tuple(sorted(set(old.environments) | set(new.environments))),
        variants=tuple(variants.values()),
        required_by=tuple(sorted(set(old.required_by) | set(new.required_by))),
    )


def _add_required_by(entry: LockedKernel, required_by: Iterable[str]) -> LockedKernel:
    return replace(entry, required_by=tuple(sorted(set(entry.required_by) | set(required_by))))


def _check_disjoint(entries: list[LockedKernel], direct: set[tuple[str, str]]) -> list[LockedKernel]:
    """Entries of one repo must cover disjoint environments; the same commit twice is folded together (into the
    entry the project asked for, if any)."""

    def is_direct(entry: LockedKernel) -> bool:
        return (entry.repo, entry.requested) in direct

    result: list[LockedKernel] = []
    for entry in sorted(entries, key=lambda e: (not is_direct(e), e.repo, e.requested)):
        for i, other in enumerate(result):
            overlap = set(other.environments) & set(entry.environments)
            if other.repo != entry.repo or not overlap:
                continue
            if other.commit != entry.commit:
                who = ", ".join(entry.required_by) or "the project"
                raise ResolutionError(
                    f"conflicting requirements for {entry.repo} on {', '.join(sorted(overlap))}: "
                    f"{other.requested} ({other.commit[:12]}) and {entry.requested} ({entry.commit[:12]}, "
                    f"required by {who})",
                    fix="pin one revision in [tool.kernlock.kernels]",
                )
            if not is_direct(other):
                result[i] = _add_required_by(other, entry.required_by)
            rest = set(entry.environments) - overlap
            if not rest:
                break
            entry = _restrict(entry, rest)
        else:
            result.append(entry)
    return result


def _restrict(entry: LockedKernel, envs: set[str]) -> LockedKernel:
    variants = []
    for v in entry.variants:
        keep = tuple(e for e in v.environments if e in envs)
        if keep:
            variants.append(replace(v, environments=keep))
    return replace(entry, environments=tuple(sorted(envs)), variants=tuple(variants))
