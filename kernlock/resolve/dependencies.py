"""``kernel-depends`` of a build's metadata.json: the kernels a build needs, as (repo, revision) to resolve too."""

from __future__ import annotations

from kernlock.errors import ResolutionError
from kernlock.util import names

__all__ = ["declared_dependencies"]


def declared_dependencies(metadata: object, where: str) -> list[tuple[str, str]]:
    """``kernel-depends`` of a metadata.json as (repo, rev): ``"version": N`` -> ``vN``, else the revision."""
    deps = metadata.get("kernel-depends") if isinstance(metadata, dict) else None
    if not isinstance(deps, list):
        if deps is None:
            return []
        raise ResolutionError(f"{where}: `kernel-depends` is not a list", fix="report it to the kernel's publisher")
    found: list[tuple[str, str]] = []
    for dep in deps:
        try:
            repo = names.check_repo(dep.get("repo-id") if isinstance(dep, dict) else None)
        except ValueError as err:
            raise ResolutionError(
                f"{where}: kernel dependency {dep!r:.200} has no `repo-id` (org/name)",
                why=str(err),
                fix="report it to the kernel's publisher",
            ) from None
        version, revision = dep.get("version"), dep.get("revision")
        if isinstance(version, int) and not isinstance(version, bool) and 0 <= version < 10_000:
            found.append((repo, f"v{version}"))
        elif version is None and isinstance(revision, str) and _is_ref(revision):
            found.append((repo, revision))
        else:
            raise ResolutionError(
                f"{where}: kernel dependency on {repo} has no `version` (an integer) or `revision` (a branch, tag or "
                "commit)",
                fix="report it to the kernel's publisher",
            )
    return found


def _is_ref(value: str) -> bool:
    try:
        names.check_ref(value)
    except ValueError:
        return False
    return True
