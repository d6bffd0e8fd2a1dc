"""Loader adapters: which seams of the installed ``kernels`` library kernlock hooks, chosen by probing them.

Each generation of the kernels loader routes Hub loads through different internals. An adapter names the seams
it needs (attributes, the parameters they take, the globals a call chain looks up) and is chosen when all of
them are present — never by version string:

* ``resolver`` (kernels 0.17): :mod:`kernlock.runtime.loaders.resolver_gen`;
* ``utils`` (kernels 0.15, 0.16): :mod:`kernlock.runtime.loaders.utils_gen`;
* anything else (``unknown``), or an adapter that fails to install: :mod:`kernlock.runtime.loaders.fallback` pins the
  locked, verified builds through the official ``LOCAL_KERNELS`` switch and says once what it cannot cover.

What a locked load gets (strict/warn, revisions, verification) is decided in one place for all of them:
:mod:`kernlock.runtime.policy`. Probing imports ``kernels`` modules, never torch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from kernlock.runtime.loaders._common import Patcher

__all__ = ["COVERAGE", "PATHS", "Adapter", "Probe", "install", "load_paths", "probe", "probe_files"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """The installed loader: its generation (``resolver``, ``utils``, ``unknown``; None when kernels is not
    installed), its version, and for ``unknown`` the seams the closest known generation lacks."""

    generation: str | None
    kernels: str | None
    missing: tuple[str, ...] = ()


class Adapter(Protocol):
    """What an adapter module defines (:mod:`~kernlock.runtime.loaders.resolver_gen`,
    :mod:`~kernlock.runtime.loaders.utils_gen`)."""

    #: The generation it hooks (``resolver``, ``utils``).
    NAME: str
    #: (module, attribute path, parameters it must take) of every seam it patches or builds on.
    SEAMS: tuple[tuple[str, str, tuple[str, ...]], ...]
    #: (module, function, global it must look up at call time): the call chains its hooks rely on.
    CALLS: tuple[tuple[str, str, str], ...]

    def missing(self) -> list[str]:
        """The seams the installed kernels lacks (empty: the adapter fits)."""
        ...

    def install(self, patcher: Patcher) -> None:
        """Patch the seams through ``patcher`` (so that a failure halfway can be undone)."""
        ...


def _adapters() -> tuple[Adapter, ...]:
    from kernlock.runtime.loaders import resolver_gen, utils_gen

    return resolver_gen, utils_gen


def _version(kernels: ModuleType | None = None) -> str | None:
    from kernlock.environments.compat import installed

    return str(getattr(kernels, "__version__", None) or installed("kernels") or "") or None


def probe() -> Probe:
    """Which adapter fits the installed kernels (imports kernels modules, not torch)."""
    try:
        import kernels
    except ModuleNotFoundError as err:
        if err.name == "kernels":
            return Probe(generation=None, kernels=None)
        return Probe(generation="unknown", kernels=_version(), missing=(f"import kernels: {err}",))
    except Exception as err:  # a broken install: nothing can be hooked
        return Probe(
            generation="unknown", kernels=_version(), missing=(f"import kernels: {type(err).__name__}: {err}",)
        )
    gaps: list[list[str]] = []
    for adapter in _adapters():
        lacking = adapter.missing()
        if not lacking:
            return Probe(generation=adapter.NAME, kernels=_version(kernels))
        gaps.append(lacking)
    fewest = min(gaps, key=len)
    return Probe(generation="unknown", kernels=_version(kernels), missing=tuple(fewest))


def probe_files() -> Probe:
    """The installed loader's generation read from its source files, without importing kernels (its import pulls
    in huggingface_hub and httpx: ~250 ms); what `kernlock env` shows. An adapter fits when every seam it names is
    defined in the module's source with the parameters it needs; when none fits, :func:`probe` (which imports
    kernels) names what is missing."""
    import importlib.util

    from kernlock.environments.compat import installed

    try:
        spec = importlib.util.find_spec("kernels")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return probe()
    package = Path(next(iter(spec.submodule_search_locations)))
    for adapter in _adapters():
        calls = [(module, fn, ()) for module, fn, _name in adapter.CALLS]
        if all(_defined(package, module, path, params) for module, path, params in (*adapter.SEAMS, *calls)):
            return Probe(generation=adapter.NAME, kernels=installed("kernels"))
    return probe()


def _defined(package: Path, module: str, path: str, params: tuple[str, ...]) -> bool:
    """Whether ``module`` (``kernels.x``) defines ``path`` (``Class.method`` or ``function``) taking ``params``."""
    relative = Path(*module.split(".")[1:])
    for source in (package / relative.with_suffix(".py"), package / relative / "__init__.py"):
        text = _source(str(source))
        if text is None:
            continue
        return all(_defines(text, name) for name in path.split(".")) and all(_has_word(text, p) for p in params)
    return False


@functools.lru_cache(maxsize=32)
def _source(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _has_word(text: str, word: str) -> bool:
    """Whether ``text`` holds ``word`` as a whole word (regex ``\\bword\\b``, by ``str.find``: no pattern to
    compile for each of the seams' names and parameters)."""
    at = text.find(word)
    while at >= 0:
        end = at + len(word)
        if (at == 0 or not _is_word_char(text[at - 1])) and (end == len(text) or not _is_word_char(text[end])):
            return True
        at = text.find(word, at + 1)
    return False


def _defines(text: str, name: str) -> bool:
    """Whether a line of ``text`` starts (after indentation) with ``class name`` or ``[async ]def name(``."""
    for form in (f"class {name}", f"def {name}("):
        at = text.find(form)
        while at >= 0:
            head = text[text.rfind("\n", 0, at) + 1 : at].strip()
            end = at + len(form)
            whole = form.endswith("(") or end == len(text) or not _is_word_char(text[end])
            if whole and (head == "" or (head == "async" and form.startswith("def"))):
                return True
            at = text.find(form, at + 1)
    return False


#: The adapter (or "fallback") installed in this process.
_installed: str | None = None


def install(kernels: ModuleType) -> str:
    """Install the adapter that fits (once per process; again only to clear caches), else the fallback.
    Returns the generation installed, or ``"fallback"``. Never raises for a loader it does not understand."""
    global _installed
    adapters = {adapter.NAME: adapter for adapter in _adapters()}
    current = adapters.get(_installed or "")
    if current is not None:
        current.install(Patcher())  # hooks are marked: this only clears the revision caches
        return current.NAME
    version = _version(kernels) or "?"
    if _installed == "fallback":
        from kernlock.runtime.loaders import fallback

        fallback.install(version, "")  # a new activation: pin the builds of its lock
        return _installed
    found = probe()
    adapter = adapters.get(found.generation or "")
    if adapter is not None:
        patcher = Patcher()
        try:
            adapter.install(patcher)
        except Exception as err:  # half installed: undo, and fall back
            patcher.revert()
            reason = f"hooking its {adapter.NAME} seams failed: {type(err).__name__}: {err}"
        else:
            _installed = adapter.NAME
            return _installed
    else:
        shown = ", ".join(found.missing[:3]) + (", ..." if len(found.missing) > 3 else "")
        reason = f"it lacks {shown}"
    from kernlock.runtime.loaders import fallback

    _installed = "fallback"
    fallback.install(version, reason)
    return _installed


# -- what each generation covers (`kernlock env`, docs/activation.md) ----------------------------------------

_RESOLVERS = "kernels.resolver HubResolver/HubCacheResolver.resolve"
_LOCKED_RESOLVERS = "kernels.resolver LockedHubResolver/LockedHubCacheResolver.resolve"
_VERSION_REF = "kernels._versions.resolve_version_spec_as_ref"
_FALLBACK = "LOCAL_KERNELS"

#: (load path, uses transformers) in the order `kernlock env` lists them.
PATHS: tuple[tuple[str, bool], ...] = (
    ("get_kernel(version=N)", False),
    ("get_kernel(revision=R)", False),
    ('transformers attn_implementation="org/repo"', True),
    ('transformers attn_implementation="flash_attention_2" fallback', True),
    ("LayerRepository / kernelize", False),
    ("FuncRepository", False),
    ("get_locked_kernel / load_kernel", False),
    ("LockedLayerRepository", False),
    ("has_kernel", False),
    ("install_kernel", False),
    ("kernel dependencies (kernel-depends)", False),
)

#: generation -> load path -> (covered, how).
COVERAGE: dict[str, dict[str, tuple[bool, str]]] = {
    "resolver": {
        "get_kernel(version=N)": (True, _RESOLVERS),
        "get_kernel(revision=R)": (True, f"{_RESOLVERS}; the lock must satisfy the revision"),
        'transformers attn_implementation="org/repo"': (True, f"kernels.get_kernel -> {_RESOLVERS}"),
        'transformers attn_implementation="flash_attention_2" fallback': (True, f"kernels.get_kernel -> {_RESOLVERS}"),
        "LayerRepository / kernelize": (True, f"{_VERSION_REF} + {_RESOLVERS}"),
        "FuncRepository": (True, f"{_VERSION_REF} + {_RESOLVERS}"),
        "get_locked_kernel / load_kernel": (True, f"{_LOCKED_RESOLVERS}; their commit must be the locked one"),
        "LockedLayerRepository": (True, f"{_LOCKED_RESOLVERS}; their commit must be the locked one"),
        "has_kernel": (True, _RESOLVERS),
        "install_kernel": (True, _RESOLVERS),
        "kernel dependencies (kernel-depends)": (True, f"{_RESOLVERS} (each dependency, recursively)"),
    },
    "utils": {
        "get_kernel(version=N)": (True, f"{_VERSION_REF} + kernels.utils.install_kernel"),
        "get_kernel(revision=R)": (True, "kernels.utils.install_kernel; the lock must satisfy the revision"),
        'transformers attn_implementation="org/repo"': (True, "kernels.get_kernel -> kernels.utils.install_kernel"),
        'transformers attn_implementation="flash_attention_2" fallback': (
            True,
            "kernels.get_kernel -> kernels.utils.install_kernel",
        ),
        "LayerRepository / kernelize": (True, f"{_VERSION_REF} + kernels.utils.install_kernel"),
        "FuncRepository": (True, f"{_VERSION_REF} + kernels.utils.install_kernel"),
        "get_locked_kernel / load_kernel": (
            True,
            "kernels.utils.install_kernel / _resolve_local_variant_path; their commit must be the locked one",
        ),
        "LockedLayerRepository": (True, "kernels.utils.install_kernel; their commit must be the locked one"),
        "has_kernel": (True, "kernels.has_kernel replaced (a name bound before activation is not)"),
        "install_kernel": (True, "kernels.install_kernel / kernels.utils.install_kernel replaced"),
        "kernel dependencies (kernel-depends)": (False, "not supported by this loader"),
    },
    "unknown": {
        "get_kernel(version=N)": (True, _FALLBACK),
        "get_kernel(revision=R)": (True, f"{_FALLBACK}; the revision is NOT checked against the lock"),
        'transformers attn_implementation="org/repo"': (True, _FALLBACK),
        'transformers attn_implementation="flash_attention_2" fallback': (True, _FALLBACK),
        "LayerRepository / kernelize": (True, f"{_FALLBACK}; version=N still asks the Hub for the branch"),
        "FuncRepository": (True, f"{_FALLBACK}; version=N still asks the Hub for the branch"),
        "get_locked_kernel / load_kernel": (False, "ignore LOCAL_KERNELS"),
        "LockedLayerRepository": (False, "ignores LOCAL_KERNELS"),
        "has_kernel": (True, f"{_FALLBACK}, where the loader reads it there (kernels 0.17 does)"),
        "install_kernel": (False, "ignores LOCAL_KERNELS"),
        "kernel dependencies (kernel-depends)": (True, f"{_FALLBACK}, where the loader reads it there (0.17 does)"),
    },
}


def load_paths(generation: str | None, transformers_note: str | None = None) -> list[dict[str, Any]]:
    """Each load path, whether kernlock pins it with this loader, and how. ``transformers_note``: why
    transformers loads no Hub kernel at all (its version gate), which then marks its paths uncovered."""
    table = COVERAGE.get(generation or "")
    if table is None:
        return []
    rows = []
    for path, through_transformers in PATHS:
        covered, how = table[path]
        if through_transformers and transformers_note:
            covered, how = False, transformers_note
        rows.append({"path": path, "covered": covered, "how": how})
    return rows
