"""The project's inputs: the [tool.kernlock] table of pyproject.toml <-> Requirements.

Reading validates every entry and names the offending key; edits (:mod:`kernlock.project.edit`) go through
tomlkit so that comments, order and formatting of everything else in pyproject.toml are kept.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from kernlock.environments import facts
from kernlock.environments.environment import Environment
from kernlock.errors import EnvironmentStringError, ProjectError, SpecError
from kernlock.lock import interop
from kernlock.lock.file import LOCK_NAME
from kernlock.project import signatures as sigpolicy
from kernlock.project.conditions import Condition
from kernlock.project.location import PYPROJECT, find_root, locate
from kernlock.project.signatures import SignaturePolicy
from kernlock.util import names
from kernlock.util.digest import sha256_hex
from kernlock.util.wording import unknown_keys

if TYPE_CHECKING:
    import tomlkit

__all__ = [
    "PYPROJECT",
    "Pin",
    "Project",
    "Requirement",
    "Spec",
    "Upgrade",
    "find_root",
    "load",
    "locate",
    "read_document",
]


_EXAMPLE = "torch211-cxx11-cu128-x86_64-linux"
#: The keys of [tool.kernlock], in the order its unknown-key message lists them.
_TABLE_KEYS = ("environments", "kernels", "signatures", "provenance")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pin:
    """One revision of a requirement, optionally only for environments where ``when`` holds."""

    rev: str
    when: Condition | None = None

    def as_data(self) -> dict[str, str]:
        data = {"rev": self.rev}
        if self.when is not None:
            data["when"] = self.when.text
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Requirement:
    """A requested kernel repo: its pins (first match wins), whether its publisher is trusted by hand, and the
    environments it is locked for (None: every one; `kernlock add --implicit` scopes what transformers loads on some
    devices only)."""

    repo: str
    pins: tuple[Pin, ...]
    trust: bool = False
    environments: tuple[str, ...] | None = None

    @property
    def org(self) -> str:
        return self.repo.split("/", 1)[0]

    def applies_to(self, env: Environment | str) -> bool:
        """Whether the lock must serve this requirement on ``env``."""
        return self.environments is None or str(env) in self.environments

    def pin_for(self, env: Environment) -> Pin:
        """The first pin whose `when` holds on ``env``; SpecError naming the environment if none does."""
        for pin in self.pins:
            if pin.when is None or pin.when.matches(env):
                return pin
        raise SpecError(
            f"no entry for {self.repo} in [tool.kernlock.kernels] applies to environment {env}",
            fix=f'add a fallback entry without `when`, e.g. {{ rev = "{self.pins[-1].rev}" }}',
        )

    def as_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"pins": [pin.as_data() for pin in self.pins], "trust": self.trust}
        if self.environments is not None:  # absent otherwise: the digest of every unscoped project is unchanged
            data["environments"] = list(self.environments)
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Spec:
    """A command-line spec ``org/name[@rev]``."""

    repo: str
    rev: str | None

    @classmethod
    def parse(cls, text: str) -> Spec:
        """Parse ``org/name[@rev]``; raise SpecError showing the accepted forms."""
        repo, _, rev = text.strip().partition("@")
        if (
            not _valid(names.check_repo, repo)
            or (rev and not _valid(names.check_ref, rev))
            or text.strip().endswith("@")
        ):
            raise SpecError(
                f"invalid kernel spec '{text}': expected org/name or org/name@rev "
                "(rev: a version branch like v1, a tag, a branch or a commit sha), "
                "e.g. kernels-community/activation@v1."
            )
        return cls(repo=repo, rev=rev or None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Upgrade:
    """What may move: everything, or some kernels; nothing by default (existing pins are kept)."""

    all: bool = False
    kernels: frozenset[str] = frozenset()

    def allows(self, repo: str) -> bool:
        return self.all or repo in self.kernels


@dataclass(frozen=True, slots=True, kw_only=True)
class Project:
    """A project directory and its parsed [tool.kernlock] table (a changed project is a new value:
    ``replace(project, requirements=...)``)."""

    root: Path
    requirements: dict[str, Requirement] = field(default_factory=dict)
    environments: list[Environment] | None = None
    #: ``[tool.kernels.dependencies]`` (the kernels library's table) as repo -> ``vN``: kernlock refuses to work on
    #: the project until `kernlock import` moves them (:func:`kernlock.commands.lock.refuse_json_lock`).
    kernels_dependencies: dict[str, str] = field(default_factory=dict)
    #: ``[tool.kernlock.signatures]`` (the defaults when the table is absent).
    signatures: SignaturePolicy = field(default_factory=SignaturePolicy)
    #: ``provenance``: whether activated processes write kernels.lock into saved model folders and compare the
    #: one a loaded model carries (docs/provenance.md); not part of ``requires_hash`` (it moves no pin).
    provenance: bool = True

    @property
    def pyproject(self) -> Path:
        return self.root / PYPROJECT

    @property
    def lockfile(self) -> Path:
        return self.root / LOCK_NAME

    def requires_hash(self) -> str:
        """Digest of the normalized [tool.kernlock] table: the lock is stale when it changes."""
        data = {
            "environments": [e.declared() for e in sorted(self.environments)] if self.environments else None,
            "kernels": {repo: self.requirements[repo].as_data() for repo in sorted(self.requirements)},
        }
        if self.signatures.declared:  # only a declared table counts: adding kernlock's defaults moves no hash
            data["signatures"] = self.signatures.as_data()
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + sha256_hex(blob)


def load(root: Path | str) -> Project:
    """Read ``root/pyproject.toml``; a missing file or table gives an empty project."""
    root = Path(root).resolve()
    pyproject = root / PYPROJECT
    if not pyproject.exists():
        return Project(root=root)
    doc = _read_plain(pyproject)
    kernels_dependencies = interop.kernels_dependencies(doc, pyproject)
    table = _kernlock_table(doc, pyproject)
    if table is None:
        return Project(root=root, kernels_dependencies=kernels_dependencies)
    unknown = set(table) - set(_TABLE_KEYS)
    if unknown:
        raise ProjectError(f"{pyproject}: {unknown_keys(unknown, _TABLE_KEYS, '[tool.kernlock]')}.")
    signatures = sigpolicy.parse(table.get("signatures"), pyproject)
    provenance = table.get("provenance", True)
    if not isinstance(provenance, bool):
        raise ProjectError(f"{pyproject}: [tool.kernlock] provenance must be true or false, not {_kind(provenance)}.")
    environments = _parse_environments(table.get("environments"), pyproject)
    kernels = table.get("kernels", {})
    if not isinstance(kernels, dict):
        raise ProjectError(f"{pyproject}: [tool.kernlock.kernels] must be a table of repo = rev.")
    seen: dict[str, str] = {}
    requirements: dict[str, Requirement] = {}
    for repo, rev in kernels.items():
        twin = seen.setdefault(repo.casefold(), repo)
        if twin != repo:
            raise ProjectError(
                f'{pyproject}: [tool.kernlock.kernels] names one repo twice ("{twin}" and "{repo}"; '
                "repo ids are not case-sensitive)",
                fix="keep one",
            )
        requirements[repo] = _parse_requirement(repo, rev, pyproject)
        _check_scope(requirements[repo], environments, pyproject)
    return Project(
        root=root,
        requirements=requirements,
        environments=environments,
        kernels_dependencies=kernels_dependencies,
        signatures=signatures,
        provenance=provenance,
    )


def _read_plain(path: Path) -> dict[str, Any]:
    """``path`` as plain values, read with the standard library's parser (reading needs no formatting kept, and
    tomlkit costs a read-only command ~15 ms to import); a file it refuses goes through `_read`, so the error
    message is tomlkit's, as it always was (as is the answer to arrays nested too deep for tomllib's recursion)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError, OSError):
        return read_document(path).unwrap()


def _kernlock_table(doc: dict[str, Any], where: Path) -> dict[str, Any] | None:
    tool = doc.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, dict):
        raise ProjectError(f"{where}: `tool` must be a table ([tool.NAME] sections), not {_kind(tool)}.")
    table = tool.get("kernlock")
    if table is not None and not isinstance(table, dict):
        raise ProjectError(f"{where}: `tool.kernlock` must be a table ([tool.kernlock]), not {_kind(table)}.")
    return table


def _kind(value: object) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list"}.get(
        type(value), type(value).__name__
    )


def _parse_environments(value: Any, where: Path) -> list[Environment] | None:
    """Environment strings, or ``{ name = "...", <facts> }`` tables that also say what the loader decides on."""
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, (str, dict)) for v in value):
        raise ProjectError(
            f"{where}: [tool.kernlock] environments must be a non-empty list of environment strings (or "
            f'tables like {facts.TABLE_FORM}), e.g. ["torch213-cxx11-cpu-x86_64-linux"].'
        )
    envs = []
    for item in value:
        try:
            envs.append(Environment.from_declared(item))
        except EnvironmentStringError as err:
            raise ProjectError(f"{where}: [tool.kernlock] environments: {err.what}", why=err.why, fix=err.fix) from err
    if len(set(envs)) != len(envs):
        raise ProjectError(f"{where}: [tool.kernlock] environments lists an environment twice.")
    return sorted(envs)


def _parse_requirement(repo: str, value: Any, where: Path) -> Requirement:
    prefix = f'{where}: [tool.kernlock.kernels] "{repo}"'
    if not _valid(names.check_repo, repo):
        raise ProjectError(f"{prefix}: a key must be a repo id org/name, e.g. kernels-community/activation.")
    if isinstance(value, str):
        return Requirement(repo=repo, pins=(Pin(rev=_check_rev(value, prefix)),))
    entries = [value] if isinstance(value, dict) else value
    if not isinstance(entries, list) or not entries:
        raise ProjectError(
            f'{prefix}: expected a revision string ("v1"), a table {{ rev = "v1", trust = true }} '
            "or a list of { rev, when } tables."
        )
    pins, trust, scope = [], False, None
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ProjectError(f'{prefix}: entry {i + 1} must be a table like {{ rev = "v2", when = ... }}.')
        unknown = set(entry) - {"rev", "when", "trust", "environments"}
        if unknown or "rev" not in entry or not isinstance(entry["rev"], str):
            raise ProjectError(
                f"{prefix}: entry {i + 1} needs a string `rev` and may have `when`, `trust` and `environments` "
                f"(found {', '.join(sorted(entry)) or 'nothing'})."
            )
        if "trust" in entry and not isinstance(entry["trust"], bool):
            raise ProjectError(f"{prefix}: `trust` must be true or false.")
        trust = trust or bool(entry.get("trust", False))
        if "environments" in entry:
            scope = sorted({*(scope or ()), *_scope(entry["environments"], prefix)})
        when = None
        if "when" in entry:
            if not isinstance(entry["when"], str):
                raise ProjectError(f'{prefix}: `when` must be a string like "cuda == 12.8".')
            try:
                when = Condition.parse(entry["when"])
            except SpecError as err:
                raise ProjectError(f"{prefix}: {err.what}", why=err.why, fix=err.fix) from err
        pins.append(Pin(rev=_check_rev(entry["rev"], prefix), when=when))
    return Requirement(repo=repo, pins=tuple(pins), trust=trust, environments=None if scope is None else tuple(scope))


def _scope(value: Any, prefix: str) -> list[str]:
    """A requirement's `environments`: environment strings (of [tool.kernlock] environments)."""
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ProjectError(
            f'{prefix}: `environments` must be a non-empty list of environment strings, e.g. ["{_EXAMPLE}"].'
        )
    try:
        return [str(Environment.parse(v)) for v in value]
    except EnvironmentStringError as err:
        raise ProjectError(f"{prefix}: `environments`: {err.what}", why=err.why, fix=err.fix) from err


def _check_scope(requirement: Requirement, declared: list[Environment] | None, where: Path) -> None:
    """A requirement's `environments` must be environments the project declares."""
    if requirement.environments is None:
        return
    known = {str(env) for env in declared or ()}
    outside = [env for env in requirement.environments if env not in known]
    if outside:
        listed = ", ".join(sorted(known)) or "none: declare them in [tool.kernlock] environments"
        raise ProjectError(
            f'{where}: [tool.kernlock.kernels] "{requirement.repo}": `environments` names {", ".join(outside)}, '
            f"which [tool.kernlock] environments does not (it declares: {listed})."
        )


def _valid(check: Callable[[object], object], value: object) -> bool:
    try:
        check(value)
    except ValueError:
        return False
    return True


def _check_rev(rev: str, prefix: str) -> str:
    if not _valid(names.check_ref, rev):
        raise ProjectError(f"{prefix}: '{rev}' is not a revision (a branch, tag or commit sha).")
    return rev


def read_document(path: Path) -> tomlkit.TOMLDocument:
    """``path`` as a tomlkit document (formatting kept, for an edit)."""
    import tomlkit
    import tomlkit.exceptions

    try:
        return tomlkit.parse(path.read_text(encoding="utf-8"))
    except tomlkit.exceptions.TOMLKitError as err:
        raise ProjectError(f"{path}: not valid TOML ({err})", fix="fix the file and run the command again") from err
    except UnicodeDecodeError as err:
        raise ProjectError(
            f"{path} is not UTF-8 text ({err})", fix="save it as UTF-8 and run the command again"
        ) from err
    except OSError as err:
        raise ProjectError(f"cannot read {path}: {err.strerror or err}.") from err
