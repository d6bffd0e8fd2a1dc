"""Which version branches of a kernel serve which environments: the builds each environment's loader would choose
and accept there (:func:`refusals`), the newest version that serves them all (:func:`latest_version`, what `add`
records), the newer ones skipped and why (:func:`scan_versions`, what `outdated` says), and the pins that move to
a skipped one where it has builds (:func:`move_fix`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kernlock.environments.environment import Environment
from kernlock.errors import ResolutionError
from kernlock.lock.model import LockedFile
from kernlock.project.inputs import Pin, Requirement
from kernlock.resolve import eligibility, nobuild

if TYPE_CHECKING:
    from kernlock.hub.client import Hub

__all__ = [
    "Skipped",
    "builds_for",
    "latest_version",
    "move_fix",
    "read_metadata",
    "refusals",
    "scan_versions",
    "versions_with_builds",
]


def read_metadata(hub: Hub, repo: str, commit: str, name: str, tree: dict[str, tuple[LockedFile, ...]]) -> object:
    """The parsed ``build/<name>/metadata.json`` at ``commit`` (None when the variant has none); each distinct
    blob is fetched once per lock, however many variants or commits share it."""
    found = [f for f in tree[name] if f.path == "metadata.json"]
    if not found:
        return None
    try:
        return json.loads(hub.read_blob(repo, commit, f"build/{name}/metadata.json", found[0].hash))
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise ResolutionError(
            f"{repo}@{commit[:12]}: build/{name}/metadata.json is not JSON", fix="report it to the kernel's publisher"
        ) from err


def refusals(
    hub: Hub, repo: str, commit: str, tree: dict[str, tuple[LockedFile, ...]], chosen: dict[Environment, str | None]
) -> dict[Environment, str]:
    """Why each environment cannot use this commit (no build, or the loader would refuse the build it chooses:
    no metadata.json, a missing compute capability, a ``kernels-minver`` above the declared loader); empty when all
    can."""
    found = {}
    for env, name in sorted(chosen.items(), key=lambda item: item[0].name):
        if name is None:
            found[env] = eligibility.no_build_reason(env)
        elif (missing := eligibility.no_metadata_reason(name, [f.path for f in tree[name]])) is not None:
            found[env] = missing
        elif env.kernels is not None or env.extras.cuda_capabilities:
            metadata = read_metadata(hub, repo, commit, name, tree)
            reason = eligibility.refusal(env, name, metadata, f"{repo}@{commit[:12]} build/{name}/metadata.json")
            if reason is not None:
                found[env] = reason
    return found


def versions_with_builds(hub: Hub, repo: str, environments: Iterable[Environment]) -> list[str]:
    """The version branches of ``repo`` (oldest first) with a build every one of ``environments`` loads (its
    declared facts included: compute capabilities, loader version, free-threaded Python)."""
    envs = list(environments)
    found = []
    for number, commit in sorted(hub.refs(repo).versions().items()):
        tree = hub.build_tree(repo, commit)
        if not refusals(hub, repo, commit, tree, {env: env.select_variant(tree) for env in envs}):
            found.append(f"v{number}")
    return found


def builds_for(hub: Hub, repo: str) -> Callable[[list[Environment]], list[str]]:
    """The versions of ``repo`` with a build for given environments, as :mod:`kernlock.resolve.nobuild` asks for
    them."""
    return lambda environments: versions_with_builds(hub, repo, environments)


@dataclass(frozen=True, slots=True, kw_only=True)
class Skipped:
    """A version branch newer than the chosen one, and why it cannot serve every environment."""

    version: str
    refused: tuple[Environment, ...]  # the environments it cannot serve
    reasons: tuple[str, ...]  # "v5 lacks A, B" and "v5: ENV: why" (a build the loader would refuse)


def scan_versions(hub: Hub, repo: str, environments: list[Environment]) -> tuple[str | None, list[Skipped]]:
    """The newest version branch ``vN`` (N >= 1) with a build for every environment (None: none has), and every
    newer one with why it was skipped, newest first. ResolutionError when the repo has no stable version branch."""
    refs = hub.refs(repo)
    versions = sorted((n for n in refs.versions() if n >= 1), reverse=True)
    if not versions:
        only = ", ".join(f"v{n}" for n in refs.versions()) or "no version branches"
        raise ResolutionError(
            f"{repo} has no stable version branch (v1 or later; found: {only})",
            fix=f"ask for one explicitly, e.g. `kernlock add {repo}@v0`",
        )
    skipped: list[Skipped] = []
    for number in versions:
        commit = refs.versions()[number]
        tree = hub.build_tree(repo, commit)
        refused = refusals(hub, repo, commit, tree, {env: env.select_variant(tree) for env in environments})
        if not refused:
            return f"v{number}", skipped
        missing = [str(env) for env, reason in refused.items() if reason == eligibility.NO_BUILD]
        reasons = [f"v{number} lacks {', '.join(missing)}"] if missing else []
        reasons += [f"v{number}: {env}: {r}" for env, r in refused.items() if r != eligibility.NO_BUILD]
        skipped.append(Skipped(version=f"v{number}", refused=tuple(refused), reasons=tuple(reasons)))
    return None, skipped


def latest_version(hub: Hub, repo: str, environments: list[Environment]) -> str:
    """The newest version branch ``vN`` (N >= 1) with a build for every environment; ResolutionError if none."""
    found, skipped = scan_versions(hub, repo, environments)
    if found is not None:
        return found
    newest = skipped[0]
    single = Requirement(repo=repo, pins=(Pin(rev=newest.version),))
    fix = nobuild.when_fix(repo, newest.version, single, list(newest.refused), environments, builds_for(hub, repo))
    lacking = [reason for version in skipped for reason in version.reasons]
    raise ResolutionError(
        f"no version of {repo} has a build for every environment ({'; '.join(lacking)}). Declare fewer "
        + ("environments, or pin per environment." if fix else "environments.")
        + "".join(f"\n{line}" for line in fix)
    )


def move_fix(hub: Hub, requirement: Requirement, skipped: Skipped, environments: list[Environment]) -> list[str]:
    """What to paste into [tool.kernlock.kernels] to move ``requirement`` to the skipped version where it has
    builds (an older one where it has none); empty when no version serves the rest."""
    moving = replace(requirement, pins=(Pin(rev=skipped.version),))
    lines = nobuild.when_fix(
        requirement.repo,
        skipped.version,
        moving,
        list(skipped.refused),
        environments,
        builds_for(hub, requirement.repo),
    )
    current = {f"@{pin.rev}`" for pin in requirement.pins}  # "or move every environment" to what it asks already
    return [line for line in lines if not any(rev in line for rev in current)]
