"""`kernlock add --implicit [SPEC...]`: lock the Hub kernels the installed transformers loads by itself (its default
kernel mapping, which transformers 5.25 loads in every ``from_pretrained`` on cuda, rocm, xpu and mps), for the
project's environments, and report them per machine (`kernlock env`). docs/activation.md, "Kernels transformers
loads by itself".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernlock.commands import lock as locking
from kernlock.environments import implicit
from kernlock.errors import NotFoundError, ProjectError, ResolutionError
from kernlock.project import inputs as projects
from kernlock.util import interrupt

if TYPE_CHECKING:
    from kernlock.environments.environment import Environment
    from kernlock.hub.client import Hub
    from kernlock.lock.model import Lock, LockedKernel
    from kernlock.resolve.implicit import Plan

__all__ = ["Implicit", "add_implicit", "implicit_report", "implicit_rows"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Implicit:
    """What `add --implicit` read and did: the mapping, the plan, and the `add` it made (None: nothing to add)."""

    mapping: implicit.Mapping
    plan: Plan
    environments: tuple[str, ...]
    #: When transformers loads its mapping (in every from_pretrained, or with use_kernels=True only).
    when: str
    added: locking.AddResult | None = None
    scopes: dict[str, tuple[str, ...]] = field(default_factory=dict)


def add_implicit(root: Path | None, specs: list[str], trust: bool = False, hub: Hub | None = None) -> Implicit:
    """Record and lock the kernels transformers' default mapping loads on the project's environments (``specs``:
    only these ``org/name``), each scoped to the environments that load it; nothing is written unless every one
    resolves."""
    from kernlock.resolve import nobuild
    from kernlock.resolve.implicit import plan
    from kernlock.resolve.resolver import resolve

    interrupt.reset()
    found = projects.locate(root) if root is not None else projects.find_root()
    project = projects.load(found or Path.cwd())
    locking.refuse_json_lock(project)
    environments = locking.target_environments(project)
    mapping = implicit.read()
    if mapping.transformers is None or (mapping.why is not None and not mapping.kernels):
        raise ProjectError(
            str(mapping.why),
            why="`kernlock add --implicit` reads the kernel mapping of the transformers your training runs with",
            fix="run it in that Python environment",
        )
    chosen = plan(mapping, project, environments, list(specs))
    names = tuple(str(env) for env in environments)
    if not chosen.requirements:
        return Implicit(mapping=mapping, plan=chosen, environments=names, when=_when(mapping))
    hub = locking.hub_client(hub)
    requirements = dict(project.requirements)
    untrusted = []
    for repo, requirement in chosen.requirements.items():
        if repo not in project.requirements and not hub.is_trusted(requirement.org):
            if not trust:
                untrusted.append(_untrusted(requirement, repo in chosen.trusting))
                continue
            requirement = replace(requirement, trust=True)
        requirements[repo] = requirement
    if untrusted:
        raise nobuild.together(untrusted)
    recorded = {repo: requirements[repo] for repo in chosen.requirements}
    for repo, requirement in recorded.items():
        if len(requirement.pins) > 1 or requirement.pins[0].when is not None:
            raise ProjectError(
                f"{repo} is pinned per environment in [tool.kernlock.kernels]",
                fix=f"add {', '.join(chosen.wanted[repo])} to its `environments` by hand, then run `kernlock lock`",
            )
    candidate = replace(project, requirements=requirements)
    previous, salvaged = locking._relock_pins(project, hub)
    try:
        new = resolve(candidate, environments, hub, salvaged or previous)
    except (ResolutionError, NotFoundError) as err:
        if specs or len(chosen.requirements) < 2:
            raise
        raise type(err)(f"{err} (`kernlock add --implicit org/name ...` locks only the kernels named)") from err
    created = not project.pyproject.exists()
    from kernlock.project import edit as pyproject_edit

    revs = {repo: (r.pins[0].rev, r.trust) for repo, r in recorded.items()}
    scopes = {repo: r.environments for repo, r in recorded.items() if r.environments is not None}
    replaced = {repo: locking._as_toml(project.requirements[repo]) for repo in recorded if repo in project.requirements}
    pyproject_edit.set_requirements(project, revs, scopes)
    written = locking._write_if_changed(project, new)
    reason = "added " + ", ".join(recorded)
    result = locking.AddResult(
        added={repo: rev for repo, (rev, _) in revs.items()},
        lock=locking.LockResult(
            lock=new, written=written, reason=reason, repaired=locking._report(salvaged, new, candidate)
        ),
        created=project.pyproject if created else None,
        replaced=replaced,
    )
    return Implicit(mapping=mapping, plan=chosen, environments=names, when=_when(mapping), added=result, scopes=scopes)


def _untrusted(requirement: projects.Requirement, trusting: bool) -> ResolutionError:
    how = " (transformers loads it with trust_remote_code=True)" if trusting else ""
    return ResolutionError(
        f"{requirement.repo} is published by '{requirement.org}', which the Hub does not mark as a trusted kernel "
        f"publisher{how}",
        fix="review its code, then run `kernlock add --implicit --trust`, or lock the others alone (`kernlock add "
        "--implicit org/name ...`)",
    )


def implicit_rows(mapping: implicit.Mapping, machine: Environment, lock: Lock | None) -> list[dict[str, Any]]:
    """`kernlock env`: each kernel the mapping loads on ``machine`` (one row per repo and revision, its layers)
    and whether ``lock`` locks it here (``locked``: the commit; None: not locked; the lock wins over the version)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for kernel in mapping.kernels:
        loads = implicit.applies(kernel, machine)
        if loads is False:
            continue
        row = rows.setdefault(
            (kernel.repo, kernel.rev),
            {"repo": kernel.repo, "rev": kernel.rev, "layers": [], "locked": None, "capability_unknown": False},
        )
        if kernel.layer not in row["layers"]:
            row["layers"].append(kernel.layer)
        row["capability_unknown"] = row["capability_unknown"] or loads is None
        entry = lock.entry_for(kernel.repo, str(machine)) if lock is not None else None
        if entry is not None and entry.variant_for(str(machine)) is not None and _serves(entry, kernel):
            row["locked"] = entry.commit
    return sorted(rows.values(), key=lambda row: (row["repo"], row["rev"]))


def _serves(entry: LockedKernel, kernel: implicit.MappedKernel) -> bool:
    """Whether the locked entry serves the mapping's request: any for ``version=N`` (the lock wins over
    transformers' versions), the same revision or commit for a revision."""
    from kernlock.runtime.policy import satisfies

    return kernel.asked.startswith("version=") or satisfies(entry, kernel.rev)


def implicit_report(machine: Environment, lock: Lock | None) -> dict[str, Any]:
    """`kernlock env`'s ``implicit``: the installed transformers, when it loads its mapping, this machine's device,
    the devices the mapping names, and :func:`implicit_rows` (none where transformers loads nothing unasked: the
    mapping is then not read)."""
    mapping = implicit.read(unasked=True)
    return {
        "transformers": mapping.transformers,
        "by_default": mapping.by_default,
        "when": _when(mapping),
        "device": implicit.device_of(machine),
        "devices": sorted({kernel.device for kernel in mapping.kernels}),
        "kernels": implicit_rows(mapping, machine, lock),
        "why": mapping.why,
    }


def _when(mapping: implicit.Mapping) -> str:
    """When transformers loads its mapping."""
    from packaging.version import Version

    if mapping.by_default:
        return "in every from_pretrained; USE_HUB_KERNELS=0 turns it off"
    if mapping.transformers is not None and Version(mapping.transformers) >= Version(f"{implicit.DEFAULT_ON}.0.dev0"):
        return "in every from_pretrained, but USE_HUB_KERNELS turns it off here"
    return (
        f"with use_kernels=True only (transformers {implicit.DEFAULT_ON}+: in every from_pretrained, unless "
        "USE_HUB_KERNELS=0)"
    )
