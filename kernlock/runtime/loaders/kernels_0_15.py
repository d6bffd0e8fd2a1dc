"""The ``kernels-0.15`` generation of the kernels loader (kernels 0.15, 0.16; its range and tested releases:
:mod:`kernlock.generations.supported`): every load path is a function of ``kernels/utils.py`` that looks the next
one up as a module global at call time.

* ``install_kernel(repo_id, *, revision, ...) -> Path`` (the variant folder): ``get_kernel`` (``version=`` and
  ``revision=``), ``LayerRepository``/``FuncRepository`` and their ``Locked*`` twins (through ``get_kernel``),
  ``get_locked_kernel``, and the public ``kernels.install_kernel``. For a locked repo: the verified folder.
* ``_resolve_local_variant_path(api, repo_id, *, revision, ...) -> Path``: ``load_kernel`` (kernels' own lock).
* ``kernels._versions.resolve_version_spec_as_ref(repo_id, version_spec)`` -> a ``GitRefInfo`` whose
  ``target_commit`` ``select_revision_or_version`` returns: the locked commit, without a request.
* ``_check_trust_remote_code(repo_id, trust_remote_code)``: asks the Hub before the version is resolved; skipped
  for a locked repo (trust was checked when it was added), and an unlocked repo is refused here in strict mode.
* ``_import_from_path(variant_path, repo_info)``: a locked build is recorded with its repo and locked commit, so
  ``kernels.get_loaded_kernels()`` reports its origin (``load_kernel`` would record none).
* ``has_kernel``: a locked repo is answered from the lock (the verified build, its architecture check) instead
  of the Hub's file listing; the module global and the public re-export are replaced.

Kernel dependencies (``kernel-depends``) do not exist in this generation. Its loader's variant rule lacks the
``tpu`` backend and the Metal macOS check of kernels 0.17; locks keep choosing by kernlock's copy of the 0.17 rule
(:mod:`kernlock.variants.rule`), so a lock is the same whichever kernels makes it.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from kernlock.runtime.loaders._common import (
    VERSION_REF,
    Patcher,
    clear_revision_caches,
    find,
    has_params,
    hook_version_ref,
    hooked,
    read_call,
    unreadable,
    uses_global,
    with_argument,
    wrap,
)

__all__ = ["CALLS", "COVERAGE", "ID", "SEAMS", "install", "missing"]

ID = "kernels-0.15"

#: (module, attribute path, parameters it must take) of every seam this adapter patches.
SEAMS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("kernels.utils", "install_kernel", ("repo_id", "revision")),
    ("kernels.utils", "_resolve_local_variant_path", ("repo_id", "revision")),
    ("kernels.utils", "_check_trust_remote_code", ("repo_id",)),
    ("kernels._versions", "resolve_version_spec_as_ref", ("repo_id", "version_spec")),
)
#: (module, function, global it must look up at call time): the call chains the hooks rely on.
CALLS: tuple[tuple[str, str, str], ...] = (
    ("kernels.utils", "get_kernel", "install_kernel"),
    ("kernels.utils", "get_kernel", "_check_trust_remote_code"),
    ("kernels.utils", "load_kernel", "_resolve_local_variant_path"),
    ("kernels._versions", "select_revision_or_version", "resolve_version_spec_as_ref"),
)

_INSTALL = "kernels.utils.install_kernel"
#: Each load path (:data:`kernlock.runtime.loaders.PATHS`) -> (pinned by kernlock, how): `kernlock env`.
COVERAGE: dict[str, tuple[bool, str]] = {
    "get_kernel(version=N)": (True, f"{VERSION_REF} + {_INSTALL}"),
    "get_kernel(revision=R)": (True, f"{_INSTALL}; the lock must satisfy the revision"),
    'transformers attn_implementation="org/repo"': (True, f"kernels.get_kernel -> {_INSTALL}"),
    'transformers attn_implementation="flash_attention_2" fallback': (True, f"kernels.get_kernel -> {_INSTALL}"),
    "LayerRepository / kernelize": (True, f"{VERSION_REF} + {_INSTALL}"),
    "FuncRepository": (True, f"{VERSION_REF} + {_INSTALL}"),
    "get_locked_kernel / load_kernel": (
        True,
        f"{_INSTALL} / _resolve_local_variant_path; their commit must be the locked one",
    ),
    "LockedLayerRepository": (True, f"{_INSTALL}; their commit must be the locked one"),
    "has_kernel": (True, "kernels.has_kernel replaced (a name bound before activation is not)"),
    "install_kernel": (True, f"kernels.install_kernel / {_INSTALL} replaced"),
    "kernel dependencies (kernel-depends)": (False, "not supported by this loader"),
}


def missing() -> list[str]:
    """The seams this kernels lacks (empty: this adapter fits)."""
    gaps = [f"{module}.{path}" for module, path, params in SEAMS if not has_params(find(module, path), *params)]
    gaps += [f"{module}.{fn} -> {name}" for module, fn, name in CALLS if not uses_global(find(module, fn), name)]
    return gaps


def install(patcher: Patcher) -> None:
    from kernels import _versions, utils

    hooks: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
        "install_kernel": _hook_variant_path("install_kernel", dependencies=True),
        "_resolve_local_variant_path": _hook_variant_path("_resolve_local_variant_path", dependencies=False),
        "_check_trust_remote_code": _hook_trust,
        "has_kernel": _hook_has_kernel,
        "_import_from_path": _hook_import,
    }
    for name, make in hooks.items():
        original = getattr(utils, name, None)
        if original is None or hooked(original):
            continue
        new = make(original)
        # kernels.utils itself, and every kernels module that bound the same function (``kernels.install_kernel``).
        for module_name, module in list(sys.modules.items()):
            ours = module_name == "kernels" or module_name.startswith("kernels.")
            if ours and module is not None and vars(module).get(name) is original:
                patcher.replace(module, name, new)
    if not hooked(_versions.resolve_version_spec_as_ref):
        patcher.replace(
            _versions, "resolve_version_spec_as_ref", hook_version_ref(_versions.resolve_version_spec_as_ref)
        )
    clear_revision_caches()


def _hook_variant_path(name: str, dependencies: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``install_kernel`` / ``_resolve_local_variant_path``: the verified variant folder of a locked repo."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def body(
            original: Callable[..., Any], sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            from kernlock.runtime import policy

            if not policy.active():
                return original(*args, **kwargs)
            call = read_call(sig, args, kwargs)
            if call is None:
                unreadable(name)
                return original(*args, **kwargs)
            repo, revision, backend = call.get("repo_id"), call.get("revision"), call.get("backend")
            if (
                not isinstance(repo, str)
                or not isinstance(revision, str)
                or not (backend is None or isinstance(backend, str))
            ):
                return original(*args, **kwargs)
            located = policy.locate(repo, revision=revision, backend=backend)
            if located is None:  # unlocked, warn mode
                return original(*args, **kwargs)
            if dependencies and call.get("validate_dependencies") is True:  # kernels 0.16: Python dependencies
                validate = find("kernels.utils", "_validate_variant_dependencies")
                if callable(validate):
                    validate(located.path)
            return located.path

        return wrap(original, body)

    return make


def _asked_by_caller() -> str:
    """``version=N`` / ``revision=R`` of the kernels function that asked (for a message), from its frame."""
    try:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("kernlock"):
            frame = frame.f_back
        names = dict(frame.f_locals) if frame is not None else {}
    except Exception:  # an interpreter without frames: a plainer message
        names = {}
    version, revision = names.get("version"), names.get("revision")
    if isinstance(version, int) and not isinstance(version, bool):
        return f"version={version}"
    if isinstance(revision, str):
        return f"revision={revision}"
    return "a Hub load"


def _hook_trust(original: Callable[..., Any]) -> Callable[..., Any]:
    """The publisher-trust request comes before the version is resolved: none for a locked repo; an unlocked
    repo is refused here in strict mode, before any request."""

    def body(
        original: Callable[..., Any], sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        from kernlock.runtime import policy

        call = read_call(sig, args, kwargs) if policy.active() else None
        repo = (call or {}).get("repo_id")
        if not isinstance(repo, str) or policy.locked_entry(repo, _asked_by_caller()) is None:
            return original(*args, **kwargs)
        return None

    return wrap(original, body)


def _hook_import(original: Callable[..., Any]) -> Callable[..., Any]:
    """Record a locked build with its Hub origin (repo, locked commit)."""

    def body(
        original: Callable[..., Any], sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        from kernlock.runtime import policy

        call = read_call(sig, args, kwargs) if policy.active() else None
        entry = policy.origin_of(call.get("variant_path")) if call is not None else None
        repo_info = getattr(sys.modules.get("kernels.utils"), "RepoInfo", None)
        if entry is None or sig is None or "repo_info" not in sig.parameters or repo_info is None:
            return original(*args, **kwargs)
        try:
            origin = repo_info(repo_id=entry.repo, revision=entry.commit)
        except Exception:  # a RepoInfo of other fields: recorded without its origin, as kernels would
            return original(*args, **kwargs)
        args, kwargs = with_argument(sig, args, kwargs, "repo_info", origin)
        return original(*args, **kwargs)

    return wrap(original, body)


def _hook_has_kernel(original: Callable[..., Any]) -> Callable[..., Any]:
    """A locked repo has a build here when the lock has one: answered from the verified build, not the Hub."""

    def body(
        original: Callable[..., Any], sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        from kernlock.runtime import policy

        call = read_call(sig, args, kwargs) if policy.active() else None
        if call is None:
            return original(*args, **kwargs)
        repo, version, revision, backend = (call.get(k) for k in ("repo_id", "version", "revision", "backend"))
        by_version = isinstance(version, int) and not isinstance(version, bool) and revision is None
        by_revision = isinstance(revision, str) and version is None
        if (
            not isinstance(repo, str)
            or not (by_version or by_revision)
            or not (backend is None or isinstance(backend, str))
        ):
            return original(*args, **kwargs)
        located = policy.locate(repo, version=version, revision=revision, backend=backend)
        if located is None:
            return original(*args, **kwargs)
        check = find("kernels.archs", "_check_arch_incompatibility")
        metadata = find("kernels", "Metadata")
        if call.get("check_arch", True) is not False and callable(check) and metadata is not None:
            try:
                check(metadata.read_from_file(located.path / "metadata.json"), located.variant.name)
            except RuntimeError:
                return False
        return True

    return wrap(original, body)
