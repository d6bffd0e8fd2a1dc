"""The Lock model: frozen values validated when they are constructed (:mod:`kernlock.lock.file` reads and writes
them as kernels.lock). Each field declares beside it its key in the lock, the lock-version it appeared in and how it
is read and written (:func:`kernlock.lock.schema.key`): reader, writer and JSON views derive from that.

Every value is checked with :mod:`kernlock.util.names`, so a Lock that exists holds only safe repo ids, commits, refs,
relative paths, sizes and hashes, variant names of the loader's grammar, and no duplicate or conflicting entries:
whatever reads a lock (sync, activation) builds paths from checked parts.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kernlock.lock.schema import LOADER_RULE, LOCK_VERSION, READ_VERSIONS, key
from kernlock.util import names
from kernlock.variants import RULE

__all__ = [
    "DIGEST",
    "UNSIGNED",
    "VARIANT_RULE",
    "EnvironmentFacts",
    "Lock",
    "LockedFile",
    "LockedKernel",
    "LockedVariant",
    "Signature",
    "environment_facts",
]

#: A ``sha256:`` digest as the lock writes it (``requires-hash``, ``content-hash``).
DIGEST = r"sha256:[0-9a-f]{64}"
#: The rule a new lock's variants are chosen by.
VARIANT_RULE = RULE


def _matches(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@functools.lru_cache(maxsize=1024)
def _environment_error(value: str) -> str | None:
    """Why ``value`` is not an environment string, or None (cached: a lock repeats its environments)."""
    from kernlock.environments.environment import Environment
    from kernlock.errors import EnvironmentStringError

    try:
        parsed = Environment.parse(value)
    except EnvironmentStringError as err:
        return str(err)
    return None if parsed.name == value else f"environment {value!r} has surrounding spaces"


@functools.lru_cache(maxsize=4096)
def _loads_variant(env: str, variant: str, facts: EnvironmentFacts | None = None, rule: str | None = None) -> bool:
    """Whether the loader's rule lets environment ``env`` load ``variant`` (cached). With ``facts`` and the lock's
    ``rule``: exactly that environment's rule. Without them, whether some rule and some facts would (a tvm-ffi build
    passes when some tvm-ffi version would load it, a ``cpython-3.12`` build when some Python would; the Lock checks
    it again with the recorded facts)."""
    from kernlock.environments.environment import Environment
    from kernlock.errors import ResolutionError

    if facts is None:
        return Environment.parse(env).could_load(variant)
    data = {k: list(v) if isinstance(v, tuple) else v for k, v in facts[1]}
    try:
        return Environment.from_declared({"name": env, **data}).select_variant([variant], rule=rule) == variant
    except ResolutionError:  # no Python declared: the one variant loads on some Pythons only
        return False


def _check_environments(values: object, what: str, *, full: bool = True) -> tuple[str, ...]:
    """A non-empty tuple of distinct environment strings (``full``: each one a valid environment string, which
    imports the environment grammar)."""
    _check(isinstance(values, tuple) and bool(values), f"{what}: `environments` is empty")
    assert isinstance(values, tuple)
    for env in values:
        _check(isinstance(env, str), f"{what}: environment {env!r} is not a string")
        if full:
            problem = _environment_error(env)
            _check(problem is None, f"{what}: {problem}")
    _check(len(set(values)) == len(values), f"{what}: an environment is listed twice")
    return values


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class LockedFile:
    """One file of a variant: path relative to the variant folder, size in bytes, content hash."""

    path: str = field(metadata=key("path"))
    size: int = field(metadata=key("size", kind="int"))
    hash: str = field(metadata=key("hash"))

    def __post_init__(self) -> None:
        names.check_path(self.path)
        names.check_size(self.size)
        names.check_hash(self.hash)

    @property
    def algorithm(self) -> str:
        """``sha256`` (LFS files) or ``git-sha1`` (git blob id of regular files)."""
        return self.hash.split(":", 1)[0]

    @property
    def digest(self) -> str:
        return self.hash.split(":", 1)[1]


#: A variant's ``signature`` when its build carries no ``metadata.json.sigstore``.
UNSIGNED = "unsigned"
_SIGNED_TEXT = re.compile(r"[\x21-\x7e]{1,500}")  # printable ASCII, no space: URIs, repo ids


@dataclass(frozen=True, slots=True, kw_only=True)
class Signature:
    """Who signed a build, as its sigstore bundle proved at lock time: the build signer URI (the workflow file and
    ref), the source repository (``owner/name``), the OIDC issuer, the transparency log entry, and ``sha256:`` of
    the bundle's bytes (so a bundle swapped later is noticed without verifying it again)."""

    signer: str = field(metadata=key("signer", since="3"))
    repository: str = field(metadata=key("repository", since="3"))
    issuer: str = field(metadata=key("issuer", since="3"))
    log_index: int = field(metadata=key("log-index", since="3", kind="int"))
    integrated_time: int = field(metadata=key("integrated-time", since="3", kind="int"))
    bundle: str = field(metadata=key("bundle", since="3", kind="digest"))

    def __post_init__(self) -> None:
        for attr in ("signer", "repository", "issuer"):
            text = getattr(self, attr)
            _check(isinstance(text, str) and _SIGNED_TEXT.fullmatch(text) is not None, f"bad signature {attr}")
        for attr in ("log_index", "integrated_time"):
            number = getattr(self, attr)
            _check(type(number) is int and 0 <= number < 2**63, f"bad signature {attr.replace('_', '-')}")
        _check(isinstance(self.bundle, str) and _matches(DIGEST, self.bundle), "bad signature bundle hash")


@dataclass(frozen=True, slots=True, kw_only=True)
class LockedVariant:
    """A build variant folder (``build/<name>``) and the environments that load it; ``signature``: who signed it
    (a :class:`Signature`), ``"unsigned"``, or None where signatures were not checked (``mode = "off"``, a
    lock-version 2 lock)."""

    name: str = field(metadata=key("name"))
    environments: tuple[str, ...] = field(metadata=key("environments", kind="strings"))
    signature: Signature | str | None = field(
        default=None, metadata=key("signature", since="3", kind="signature", table=Signature, inline=True)
    )
    files: tuple[LockedFile, ...] = field(metadata=key("files", kind="rows", table=LockedFile, inline=True))

    def __post_init__(self) -> None:
        self._validate(full=True)

    def _validate(self, *, full: bool) -> None:
        """``full``: every check. Otherwise (:func:`kernlock.lock.validate.entry_from_index`, whose files and
        signature were built checked) the variant's shape and every part a path is built from, but neither the
        variant grammar nor the loader's rule."""
        names.check_variant_folder(self.name)
        if full:
            _check_variant_grammar(self.name)
        _check_environments(self.environments, f"variant {self.name}", full=full)
        for env in self.environments if full else ():
            _check(_loads_variant(env, self.name), f"the kernels loader does not load variant {self.name} on {env}")
        _check(
            isinstance(self.files, tuple) and bool(self.files) and all(isinstance(f, LockedFile) for f in self.files),
            f"variant {self.name} has no files",
        )
        _check_file_set(self.name, self.files)
        _check(
            self.signature is None or self.signature == UNSIGNED or isinstance(self.signature, Signature),
            f'variant {self.name}: `signature` must be a table or "unsigned"',
        )


@functools.lru_cache(maxsize=4096)
def _check_variant_grammar(name: str) -> None:
    """The loader's variant grammar (kernlock.variants.grammar when present, else the installed loader's parser)."""
    try:
        from kernlock.variants.grammar import check_variant_name
    except ImportError:  # pragma: no cover - during the transition to kernlock's own grammar
        return
    check_variant_name(name)


def _check_file_set(variant: str, files: tuple[LockedFile, ...]) -> None:
    """No path twice (also not in another letter case), and no file where another file needs a folder."""
    seen: set[str] = set()
    folders: set[str] = set()
    for f in files:
        key = f.path.casefold()
        _check(key not in seen, f"variant {variant} lists {f.path!r} twice")
        seen.add(key)
        parts = key.split("/")
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
    clash = sorted(seen & folders)
    if clash:
        raise ValueError(f"variant {variant} lists {clash[0]!r} both as a file and as a folder")


@dataclass(frozen=True, slots=True, kw_only=True)
class LockedKernel:
    """One resolved requirement of a repo: the commit it pins and the variant per environment."""

    repo: str = field(metadata=key("repo"))
    requested: str = field(metadata=key("requested"))
    ref: str = field(metadata=key("ref"))
    commit: str = field(metadata=key("commit"))
    environments: tuple[str, ...] = field(metadata=key("environments", kind="strings"))
    variants: tuple[LockedVariant, ...] = field(metadata=key("variant", kind="tables", table=LockedVariant))
    required_by: tuple[str, ...] = field(default=(), metadata=key("required-by", kind="strings"))

    def __post_init__(self) -> None:
        self._validate(full=True)

    def _validate(self, *, full: bool) -> None:
        """``full``: everything; else every part a path is built from and the entry's shape (its variants were
        built checked: :func:`kernlock.lock.validate.entry_from_index`)."""
        names.check_repo(self.repo)
        names.check_ref(self.requested)
        names.check_ref(self.ref)
        names.check_commit(self.commit)
        _check_environments(self.environments, self.repo, full=full)
        _check(
            isinstance(self.variants, tuple)
            and bool(self.variants)
            and all(isinstance(v, LockedVariant) for v in self.variants),
            "no variants",
        )
        covered = [env for v in self.variants for env in v.environments]
        _check(len(set(covered)) == len(covered), "two variants claim the same environment")
        _check(set(covered) == set(self.environments), "the variants' environments do not match the entry's")
        _check(len({v.name for v in self.variants}) == len(self.variants), "a variant is listed twice")
        _check(isinstance(self.required_by, tuple), "bad required-by")
        for repo in self.required_by:
            names.check_repo(repo)
        _check(self.repo not in self.required_by, "an entry cannot be required by itself")

    def variant_for(self, env: str) -> LockedVariant | None:
        """The variant this entry locks for environment ``env``."""
        for variant in self.variants:
            if env in variant.environments:
                return variant
        return None


#: One environment's declared facts, as ``(name, ((key, value), ...))`` in the pyproject form (values are strings,
#: or tuples of strings for ``cuda-capabilities``).
EnvironmentFacts = tuple[str, tuple[tuple[str, Any], ...]]


def environment_facts(environments: Iterable[Any]) -> tuple[EnvironmentFacts, ...]:
    """The facts of the environments (:class:`kernlock.environments.environment.Environment`) that declare any, for a
    Lock."""
    found = []
    for env in environments:
        data = env.extras.as_data()
        if data:
            found.append((env.name, tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in data.items())))
    return tuple(sorted(found))


@functools.lru_cache(maxsize=256)
def _facts_error(entry: EnvironmentFacts) -> str | None:
    """Why one recorded environment's facts are not valid (or not in kernlock's canonical form), or None."""
    from kernlock.environments.environment import Environment
    from kernlock.errors import EnvironmentStringError

    name, items = entry
    data = {k: list(v) if isinstance(v, tuple) else v for k, v in items}
    try:
        env = Environment.from_declared({"name": name, **data})
    except EnvironmentStringError as err:
        return str(err)
    canonical = env.extras.as_data()
    if not data or canonical != data or list(canonical) != list(data):
        return f"the facts of environment {name} are not written as kernlock writes them"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Lock:
    """The whole lock: what it was made from (requires-hash), its environments (and the facts some declare) and
    its kernel entries, and the loader rule that chose the variants (``variant-rule``)."""

    #: The lock-version it was read as ("2": written before signatures were recorded); a new lock is the current.
    version: str = field(default=LOCK_VERSION, metadata=key("lock-version", kind="version"))
    requires_hash: str = field(metadata=key("requires-hash", kind="digest"))
    variant_rule: str = field(default=VARIANT_RULE, metadata=key("variant-rule", since="2", kind="rule"))
    environments: tuple[str, ...] = field(metadata=key("environments", kind="strings", empty=True))
    facts: tuple[EnvironmentFacts, ...] = field(
        default=(), metadata=key("environment-facts", since="2", kind="facts", inline=True)
    )
    kernels: tuple[LockedKernel, ...] = field(default=(), metadata=key("kernel", kind="tables", table=LockedKernel))

    def __post_init__(self) -> None:
        _check(self.version in READ_VERSIONS, f"bad lock-version {self.version!r}")
        _check(isinstance(self.requires_hash, str) and _matches(DIGEST, self.requires_hash), "bad requires-hash")
        _check(isinstance(self.variant_rule, str) and _matches(LOADER_RULE, self.variant_rule), "bad variant-rule")
        if self.environments or self.kernels:
            _check_environments(self.environments, "the lock")
        served: dict[str, set[str]] = {}
        for kernel in self.kernels:
            outside = sorted(set(kernel.environments) - set(self.environments))
            _check(not outside, f"{kernel.repo} covers {', '.join(outside)}, which the lock does not list")
            mine = served.setdefault(kernel.repo.casefold(), set())
            twice = sorted(mine & set(kernel.environments))
            _check(not twice, f"two entries of {kernel.repo} claim {', '.join(twice)}")
            mine.update(kernel.environments)
        _check(isinstance(self.facts, tuple), "bad environment facts")
        named = [entry[0] for entry in self.facts]
        _check(len(set(named)) == len(named), "environment-facts names an environment twice")
        for entry in self.facts:
            _check(entry[0] in self.environments, f"environment-facts names {entry[0]!r}, which the lock does not list")
            problem = _facts_error(entry)
            _check(problem is None, str(problem))
        declared = dict((entry[0], entry) for entry in self.facts)
        for kernel in self.kernels:
            for variant in kernel.variants:
                for env in variant.environments:
                    facts = declared.get(env)
                    loads = facts is None or _loads_variant(env, variant.name, facts, self.variant_rule)
                    _check(loads, f"the kernels loader does not load variant {variant.name} on {env} (its facts)")

    def facts_for(self, env: str) -> dict[str, Any]:
        """The facts recorded for environment ``env`` (empty when it declares none), as pyproject writes them."""
        for name, items in self.facts:
            if name == env:
                return {k: list(v) if isinstance(v, tuple) else v for k, v in items}
        return {}

    def entry_for(self, repo: str, env: str) -> LockedKernel | None:
        """The entry that serves ``repo`` on ``env`` (entries of one repo cover disjoint environments)."""
        for kernel in self.kernels:
            if kernel.repo == repo and env in kernel.environments:
                return kernel
        return None

    def entries(self, repo: str) -> list[LockedKernel]:
        return [kernel for kernel in self.kernels if kernel.repo == repo]

    @property
    def repos(self) -> list[str]:
        return sorted({kernel.repo for kernel in self.kernels})
