"""`kernlock import`: move a project from the kernels library's lock to kernlock's, keeping its commits.

``[tool.kernels.dependencies]`` (``"org/name" = 1``) becomes ``[tool.kernlock.kernels]`` (``"org/name" = "v1"``);
the commits of the JSON ``kernels.lock`` are kept wherever that commit has a build for every target environment
(kernel dependencies: for the environments it has builds for), else the version's head is locked and the reason
reported. Afterwards the JSON lock lies, byte for byte, in ``kernels.lock.json``, ``[tool.kernels.dependencies]``
is gone from pyproject.toml (so `kernels lock` cannot overwrite kernlock's lock) and ``kernels.lock`` is
kernlock's. Nothing is written unless the whole resolution succeeds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from kernlock.environments.environment import Environment, detect
from kernlock.errors import KernlockError, NotFoundError, ProjectError, ResolutionError
from kernlock.hub.client import Hub
from kernlock.lock import file as lockfile
from kernlock.lock.interop import MOVED_NAME, JsonLockPin, looks_like_json_lock, parse_json_lock
from kernlock.lock.model import Lock, LockedKernel
from kernlock.project import edit as pyproject_edit
from kernlock.project import inputs as projects
from kernlock.project.inputs import Pin, Project, Requirement
from kernlock.resolve.resolver import locked_variants, resolve
from kernlock.util import interrupt
from kernlock.util.atomic import write_bytes_atomic

__all__ = ["ImportResult", "Outcome", "import_project"]

_ADD_VERSION = re.compile(r"`kernlock add ([\w.-]+/[\w.-]+)@v(\d+)`")


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What became of one pin of the JSON lock."""

    pin: JsonLockPin
    commit: str | None  # the commit kernlock locked for it (None: no longer needed)
    why: str | None  # why the JSON lock's commit was not kept (None when it was)

    @property
    def kept(self) -> bool:
        return self.commit == self.pin.commit


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportResult:
    requirements: dict[str, str]  # repo -> revision recorded in [tool.kernlock.kernels]
    outcomes: list[Outcome]
    lock: Lock
    moved_to: Path | None  # where the JSON lock now lies (None: there was none)


def import_project(root: Path | None = None, trust: bool = False, hub: Hub | None = None) -> ImportResult:
    """Migrate the project at ``root`` (default: the enclosing one); see the module docstring."""
    interrupt.reset()
    project = projects.load(projects.locate(root))
    if not project.pyproject.exists():
        raise ProjectError(f"no pyproject.toml in {project.root}", fix="point --project at the project folder")
    declared = project.kernels_dependencies
    pins, is_json, previous_own = _read_lock(project)
    moved_to = project.root / MOVED_NAME if is_json else None
    if not declared and not pins:
        raise ProjectError(
            f"nothing to import in {project.root}",
            why="no [tool.kernels.dependencies] in pyproject.toml and no JSON kernels.lock of the kernels library",
            fix="start a kernlock project with `kernlock add org/name`",
        )
    if moved_to is not None and moved_to.exists() and moved_to.read_bytes() != project.lockfile.read_bytes():
        raise ProjectError(
            f"{moved_to} already exists",
            fix="move it away (kernlock import moves the JSON kernels.lock there), then run `kernlock import` again",
        )
    wanted = dict(declared)
    if not wanted:  # an old lock without the table: its entries (the first of a repo locked twice, as _seed keeps)
        for pin in pins:
            if all(repo.casefold() != pin.repo.casefold() for repo in wanted):
                wanted[pin.repo] = pin.rev
    requirements = dict(project.requirements)
    recorded = {}
    for repo, rev in wanted.items():
        if repo not in requirements:  # an existing [tool.kernlock.kernels] entry wins
            requirements[repo] = Requirement(repo=repo, pins=(Pin(rev=rev),), trust=trust)
            recorded[repo] = rev
    candidate = replace(project, requirements=requirements)
    hub = hub or Hub()
    for repo in recorded:
        if not trust and not hub.is_trusted(repo.split("/")[0]):
            raise ResolutionError(
                f"{repo} is published by '{repo.split('/')[0]}', which the Hub does not mark as a trusted kernel "
                "publisher",
                fix="review its code, then run `kernlock import --trust`",
            )
    environments = list(project.environments) if project.environments else [detect()]
    seeded, why_not = _seed(pins, set(wanted), environments, hub)
    previous = previous_own or Lock(
        requires_hash=candidate.requires_hash(),
        environments=tuple(str(e) for e in environments),
        kernels=tuple(seeded),
    )
    try:
        new = resolve(candidate, environments, hub, previous)
    except KernlockError as err:  # `kernlock add` refuses to run before the import: name the table to fix instead
        fixed = _ADD_VERSION.sub(r'`"\1" = \2` in [tool.kernels.dependencies], then `kernlock import`', str(err))
        if fixed == str(err):
            raise
        raise type(err)(fixed) from None
    outcomes = [_outcome(pin, new, why_not.get(pin)) for pin in pins]
    # Each step is atomic and a rerun resumes after any of them: the JSON lock's copy (identical bytes are
    # accepted above), kernlock's lock over it (read back as the previous lock), then pyproject.toml.
    if moved_to is not None:
        write_bytes_atomic(moved_to, project.lockfile.read_bytes())
    lockfile.write(project.lockfile, new)
    pyproject_edit.set_requirements(project, {repo: (rev, trust) for repo, rev in recorded.items()})
    pyproject_edit.remove_kernels_dependencies(project)
    return ImportResult(
        requirements={repo: requirements[repo].pins[0].rev for repo in wanted},
        outcomes=outcomes,
        lock=new,
        moved_to=moved_to,
    )


def _read_lock(project: Project) -> tuple[list[JsonLockPin], bool, Lock | None]:
    """The JSON lock's pins and whether there is one; else the pins of a kernlock lock already there, if any."""
    if not project.lockfile.exists():
        return [], False, None
    with open(project.lockfile, "rb") as handle:  # a JSON lock is another tool's: read at most FOREIGN_MAX of it
        data = handle.read(lockfile.FOREIGN_MAX + 1)
    text = data.decode("utf-8", errors="replace")
    if looks_like_json_lock(text):
        if len(data) > lockfile.FOREIGN_MAX:
            raise lockfile.foreign_too_large(str(project.lockfile))
        return parse_json_lock(text, str(project.lockfile)), True, None
    return [], False, lockfile.read_pins(project.lockfile)  # the project's own lock: any size


def _seed(
    pins: list[JsonLockPin], direct: set[str], environments: list[Environment], hub: Hub
) -> tuple[list[LockedKernel], dict[JsonLockPin, str]]:
    """Lock entries at the JSON lock's commits, for the resolver to keep; and why some pins cannot be kept."""
    entries: list[LockedKernel] = []
    why: dict[JsonLockPin, str] = {}
    seen: set[str] = set()
    for pin in pins:
        if pin.repo.casefold() in seen:
            why[pin] = f"{pin.repo} is locked twice in the JSON lock; the first entry is kept"
            continue
        seen.add(pin.repo.casefold())
        try:
            tree = hub.build_tree(pin.repo, pin.commit)
        except NotFoundError:
            why[pin] = f"commit {pin.commit[:12]} is not on the Hub"
            continue
        chosen = {env: env.select_variant(tree) for env in environments}
        missing = sorted(str(env) for env, name in chosen.items() if name is None)
        if missing and (pin.repo in direct or len(missing) == len(chosen)):
            why[pin] = f"commit {pin.commit[:12]} has no build for {', '.join(missing)}"
            continue
        variants = locked_variants(chosen, tree)
        covered = tuple(env for variant in variants for env in variant.environments)
        entries.append(
            LockedKernel(
                repo=pin.repo,
                requested=pin.rev,
                ref=pin.rev,
                commit=pin.commit,
                environments=covered,
                variants=variants,
            )
        )
    return entries, why


def _outcome(pin: JsonLockPin, lock: Lock, why: str | None) -> Outcome:
    entries = [k for k in lock.entries(pin.repo) if k.requested == pin.rev]
    commit = entries[0].commit if entries else None
    if why is None and commit is not None and commit != pin.commit:
        why = "a kernel that needs it now asks for another revision"
    if commit is None:
        why = why or "no locked kernel needs it any more"
    return Outcome(pin=pin, commit=commit, why=why if commit != pin.commit else None)
