"""Loader adapters: which seams of the installed ``kernels`` library kernlock hooks, chosen by probing them.

Each generation of the kernels loader routes Hub loads through different internals. One module per generation,
named after its id (:mod:`kernlock.generations.catalog`: ``kernels-0.17`` -> ``kernels_0_17``), names the seams it
needs (attributes, the parameters they take, the globals a call chain looks up), hooks them, and says what each
load path gets (``COVERAGE``). A generation is claimed only for the kernels releases whose range the compatibility
matrix tested (:func:`kernlock.generations.catalog.for_kernels`), and only when all of its seams are present (seam
names alone matched kernels 0.18 as 0.17, and every load then crashed):

* ``kernels-0.19`` (kernels 0.19, all under ``kernels._internals``): :mod:`kernlock.runtime.loaders.kernels_0_19`;
* ``kernels-0.18`` (kernels 0.18: ``Oid`` commits, load-time checks): :mod:`kernlock.runtime.loaders.kernels_0_18`;
* ``kernels-0.17`` (kernels 0.17): :mod:`kernlock.runtime.loaders.kernels_0_17`;
* ``kernels-0.15`` (kernels 0.15, 0.16): :mod:`kernlock.runtime.loaders.kernels_0_15`;
* anything else (``unknown``: a release outside every tested range, or one whose seams are not all there), or an
  adapter that fails to install: :mod:`kernlock.runtime.loaders.fallback` pins the locked, verified builds through
  the official ``LOCAL_KERNELS`` switch and says once what it cannot cover.

The generations, newest first, are those of tests/compat/matrix.toml (:mod:`kernlock.generations.supported`, generated
from it): adding one is its module here and its set in the matrix.

What a locked load gets (strict/warn, revisions, verification) is decided in one place for all of them:
:mod:`kernlock.runtime.policy`. Probing imports ``kernels`` modules, never torch.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, Protocol

from kernlock.runtime.loaders._common import Patcher

__all__ = [
    "PATHS",
    "Adapter",
    "Probe",
    "adapters",
    "coverage",
    "install",
    "load_paths",
    "probe",
    "probe_files",
    "why_unknown",
]


class Probe(NamedTuple):
    """The installed loader: its generation (``kernels-0.17``, ``kernels-0.15``, ``unknown``; None when kernels is
    not installed), its version, and for ``unknown`` the seams the closest known generation lacks (a NamedTuple:
    hooking kernels imports this module, and a frozen dataclass costs several times as much to create)."""

    generation: str | None
    kernels: str | None
    missing: tuple[str, ...] = ()


class Adapter(Protocol):
    """What an adapter module defines (:mod:`~kernlock.runtime.loaders.kernels_0_17`,
    :mod:`~kernlock.runtime.loaders.kernels_0_15`)."""

    #: The generation it hooks (``kernels-0.17``, ``kernels-0.15``).
    ID: str
    #: (module, attribute path, parameters it must take) of every seam it patches or builds on.
    SEAMS: tuple[tuple[str, str, tuple[str, ...]], ...]
    #: (module, function, global it must look up at call time): the call chains its hooks rely on.
    CALLS: tuple[tuple[str, str, str], ...]
    #: Each load path of :data:`PATHS` -> (pinned by kernlock, how).
    COVERAGE: dict[str, tuple[bool, str]]

    def missing(self) -> list[str]:
        """The seams the installed kernels lacks (empty: the adapter fits)."""
        ...

    def install(self, patcher: Patcher) -> None:
        """Patch the seams through ``patcher`` (so that a failure halfway can be undone)."""
        ...


def adapters() -> tuple[Adapter, ...]:
    """The adapter of every supported generation, newest first."""
    import importlib

    from kernlock.generations.catalog import GENERATIONS, module_name

    found: list[Adapter] = []
    for generation in GENERATIONS:
        module: Any = importlib.import_module(f"{__name__}.{module_name(generation.id)}")
        found.append(module)
    return tuple(found)


def _version(kernels: ModuleType | None = None) -> str | None:
    found = getattr(kernels, "__version__", None)
    if found:
        return str(found)
    from kernlock.environments.compat import installed  # its metadata: only when the module does not say

    return installed("kernels") or None


def probe() -> Probe:
    """Which adapter fits the installed kernels (imports kernels modules, not torch): the generation whose tested
    range holds its version (:func:`kernlock.generations.catalog.for_kernels`, the one rule), if its seams are all
    there; otherwise ``unknown``, with what is missing."""
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
    version = _version(kernels)
    adapter = _claimed(version)
    if adapter is None:
        from kernlock.generations.catalog import untested

        return Probe(generation="unknown", kernels=version, missing=(untested(version),))
    lacking = adapter.missing()
    return Probe(generation="unknown" if lacking else adapter.ID, kernels=version, missing=tuple(lacking))


def why_unknown(found: Probe) -> str:
    """Why the probed loader is ``unknown``, as a clause: a release outside every tested range, or the seams the
    generation claimed for it lacks."""
    if _claimed(found.kernels) is None:
        from kernlock.generations.catalog import untested

        return untested(found.kernels)
    shown = ", ".join(found.missing[:3]) + (", ..." if len(found.missing) > 3 else "")
    return f"it lacks {shown}"


def _claimed(version: str | None) -> Adapter | None:
    """The adapter of the generation claimed for kernels ``version``, or None."""
    from kernlock.generations.catalog import for_kernels

    generation = for_kernels(version)
    return next((a for a in adapters() if generation is not None and generation.id == a.ID), None)


def probe_files() -> Probe:
    """The installed loader's generation read from its source files, without importing kernels (its import pulls
    in huggingface_hub and httpx: ~250 ms); what `kernlock env` shows. The generation claimed for the installed
    version fits when every seam it names is defined in the module's source with the parameters it needs;
    otherwise :func:`probe` (which imports kernels) names what is missing."""
    import importlib.util

    from kernlock.environments.compat import installed

    try:
        spec = importlib.util.find_spec("kernels")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return probe()
    package = Path(next(iter(spec.submodule_search_locations)))
    version = installed("kernels")
    adapter = _claimed(version)
    if adapter is not None:
        calls = [(module, fn, ()) for module, fn, _name in adapter.CALLS]
        if all(_defined(package, module, path, params) for module, path, params in (*adapter.SEAMS, *calls)):
            return Probe(generation=adapter.ID, kernels=version)
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
    by_id = {adapter.ID: adapter for adapter in adapters()}
    current = by_id.get(_installed or "")
    if current is not None:
        current.install(Patcher())  # hooks are marked: this only clears the revision caches
        return current.ID
    version = _version(kernels) or "?"
    if _installed == "fallback":
        from kernlock.runtime.loaders import fallback

        fallback.install(version, "")  # a new activation: pin the builds of its lock
        return _installed
    found = probe()
    adapter = by_id.get(found.generation or "")
    if adapter is not None:
        patcher = Patcher()
        try:
            adapter.install(patcher)
        except Exception as err:  # half installed: undo, and fall back
            patcher.revert()
            reason = f"hooking its {adapter.ID} seams failed: {type(err).__name__}: {err}"
        else:
            _installed = adapter.ID
            return _installed
    else:
        reason = why_unknown(found)
    from kernlock.runtime.loaders import fallback

    _installed = "fallback"
    fallback.install(version, reason)
    return _installed


# -- what each generation covers (`kernlock env`, docs/activation.md) ----------------------------------------

#: (load path, uses transformers) in the order `kernlock env` lists them; each adapter's ``COVERAGE`` has them all.
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


def coverage() -> dict[str, dict[str, tuple[bool, str]]]:
    """Generation (each adapter's id, and ``unknown`` for the fallback) -> load path -> (covered, how)."""
    from kernlock.runtime.loaders import fallback

    return {**{adapter.ID: adapter.COVERAGE for adapter in adapters()}, "unknown": fallback.COVERAGE}


def load_paths(generation: str | None, transformers_note: str | None = None) -> list[dict[str, Any]]:
    """Each load path, whether kernlock pins it with this loader, and how. ``transformers_note``: why
    transformers loads no Hub kernel at all (its version gate), which then marks its paths uncovered."""
    table = coverage().get(generation or "")
    if table is None:
        return []
    rows = []
    for path, through_transformers in PATHS:
        covered, how = table[path]
        if through_transformers and transformers_note:
            covered, how = False, transformers_note
        rows.append({"path": path, "covered": covered, "how": how})
    return rows
