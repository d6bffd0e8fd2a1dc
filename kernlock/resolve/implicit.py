"""What `kernlock add --implicit` asks for: the kernels transformers' default kernel mapping loads on the project's
environments, as requirements scoped to those environments (pure: the mapping and the project in, no Hub).

Each repo is asked at the revision the mapping names (``version=N`` -> ``vN``; a third-party repo's commit) and only
for the environments whose device the mapping maps it on (a kernel mapped to some GPU capabilities only, for an
environment that declares them). A repo the project already requires where transformers loads it is kept as the
project pins it (the lock wins over transformers' versions); a scoped one is widened to the new environments.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kernlock.environments.environment import Environment
from kernlock.environments.implicit import MappedKernel, Mapping, applies
from kernlock.errors import ResolutionError, SpecError
from kernlock.project.inputs import Pin, Project, Requirement, Spec

__all__ = ["Plan", "Undecided", "plan"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Undecided:
    """A kernel the mapping loads only on GPUs of some capabilities, for an environment that declares none."""

    kernel: MappedKernel
    environment: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The requirements to record (new, or widened to more environments), and what is left as it is."""

    requirements: dict[str, Requirement]
    #: Each repo of the mapping -> the environments transformers loads it on.
    wanted: dict[str, tuple[str, ...]]
    #: Repos the project already requires on every environment transformers loads them on.
    kept: tuple[str, ...] = ()
    undecided: tuple[Undecided, ...] = ()
    #: Repos transformers loads with ``trust_remote_code=True``.
    trusting: tuple[str, ...] = ()


def plan(mapping: Mapping, project: Project, environments: list[Environment], only: list[str]) -> Plan:
    """The requirements that lock what ``mapping`` loads on ``environments`` (``only``: these repos, specs
    ``org/name``); SpecError for a spec the mapping does not load there, ResolutionError for a repo it asks at two
    revisions."""
    revs: dict[str, dict[str, str]] = {}
    undecided: list[Undecided] = []
    for kernel in mapping.kernels:
        for env in environments:
            loads = applies(kernel, env)
            if loads is None:
                undecided.append(Undecided(kernel=kernel, environment=str(env)))
            elif loads:
                revs.setdefault(kernel.repo, {}).setdefault(str(env), kernel.rev)
                if revs[kernel.repo][str(env)] != kernel.rev:
                    raise ResolutionError(
                        f"transformers {mapping.transformers} loads {kernel.repo} at {revs[kernel.repo][str(env)]} "
                        f"and {kernel.rev} on {env}",
                        fix="pin one revision by hand in [tool.kernlock.kernels]",
                    )
    chosen = _only(only, revs, mapping, environments)
    only = chosen if only else []
    requirements: dict[str, Requirement] = {}
    kept: list[str] = []
    declared = project.environments is not None
    for repo in chosen:
        envs = tuple(sorted(revs[repo]))
        rev = _one_rev(repo, revs[repo], mapping)
        old = next((r for name, r in project.requirements.items() if name.casefold() == repo.casefold()), None)
        if old is not None:
            widened = _widened(old, envs, environments)
            if widened is None:
                kept.append(old.repo)
            else:
                requirements[old.repo] = widened
            continue
        scope = envs if declared and len(envs) < len(environments) else None
        requirements[repo] = Requirement(repo=repo, pins=(Pin(rev=rev),), environments=scope)
    trusting = sorted({k.repo for k in mapping.kernels if k.trust and k.repo in chosen})
    return Plan(
        requirements=requirements,
        wanted={repo: tuple(sorted(revs[repo])) for repo in chosen},
        kept=tuple(kept),
        undecided=tuple(u for u in undecided if not only or u.kernel.repo in only),
        trusting=tuple(trusting),
    )


def _only(
    only: list[str], revs: dict[str, dict[str, str]], mapping: Mapping, environments: list[Environment]
) -> list[str]:
    """The repos to lock: every one the mapping loads on the environments, or those of ``only`` (each must be)."""
    if not only:
        return sorted(revs)
    repos = []
    for text in only:
        spec = Spec.parse(text)
        if spec.rev is not None:
            raise SpecError(
                "--implicit takes each kernel's revision from transformers' kernel mapping",
                fix=f"give {spec.repo} without @{spec.rev} (or add it pinned with `kernlock add {text}`)",
            )
        repos.append(spec.repo)
    missing = [repo for repo in repos if repo not in revs]
    if missing:
        loaded = ", ".join(sorted(revs)) or "none"
        where = ", ".join(str(env) for env in environments)
        raise SpecError(
            f"transformers {mapping.transformers} loads no {', '.join(missing)} by itself on {where} (it loads: "
            f"{loaded})",
            fix="see what it loads here with `kernlock env`, or add the kernel with `kernlock add`",
        )
    return sorted(set(repos))


def _one_rev(repo: str, by_env: dict[str, str], mapping: Mapping) -> str:
    found = sorted(set(by_env.values()))
    if len(found) > 1:
        raise ResolutionError(
            f"transformers {mapping.transformers} loads {repo} at {' and '.join(found)} on different environments",
            fix="pin it per environment by hand in [tool.kernlock.kernels] (a `when` per revision)",
        )
    return found[0]


def _widened(old: Requirement, envs: tuple[str, ...], environments: list[Environment]) -> Requirement | None:
    """``old`` scoped to ``envs`` too, or None when it already applies to every one of them."""
    if all(old.applies_to(env) for env in envs):
        return None
    assert old.environments is not None  # an unscoped requirement applies everywhere
    scope = tuple(sorted({*old.environments, *envs}))
    return replace(old, environments=None if len(scope) == len(environments) else scope)
