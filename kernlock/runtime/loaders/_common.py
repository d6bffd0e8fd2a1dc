"""What every loader adapter shares: reading a call by parameter name, patching with an undo, finding attributes.

A hook never raises a TypeError of its own: it reads the arguments it needs by name (or position) through the
original's own signature, passes every argument on unchanged, and calls the original whenever it cannot read a
call (the original then does — or refuses — what it would have done without kernlock).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

__all__ = [
    "MARK",
    "VERSION_REF",
    "Patcher",
    "clear_revision_caches",
    "find",
    "has_params",
    "hook_version_ref",
    "hooked",
    "read_call",
    "signature",
    "unreadable",
    "uses_global",
    "with_argument",
    "wrap",
]

MARK = "__kernlock_hook__"
#: The seam :func:`hook_version_ref` patches, as the coverage tables name it.
VERSION_REF = "kernels._versions.resolve_version_spec_as_ref"


def find(module: str, path: str = "") -> Any:
    """``module.path`` (attributes separated by dots), or None; never raises."""
    try:
        found: Any = importlib.import_module(module)
        for name in filter(None, path.split(".")):
            found = getattr(found, name)
    except Exception:
        return None
    return found


def signature(fn: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def has_params(fn: Any, *names: str) -> bool:
    """True when ``fn`` is callable and takes every one of ``names`` (by name)."""
    sig = signature(fn) if callable(fn) else None
    return sig is not None and all(name in sig.parameters for name in names)


def uses_global(fn: Any, name: str) -> bool:
    """True when ``fn``'s code looks ``name`` up (a module global it calls at run time)."""
    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    return code is not None and name in code.co_names


#: How to read a call of a signature without binding it: its positional-or-keyword names in order, every name, the
#: defaults. None for a signature with positional-only or variadic parameters (read by ``bind_partial``).
_Plan = tuple[tuple[str, ...], frozenset[str], dict[str, Any]]
_PLANS: dict[int, tuple[inspect.Signature, _Plan | None]] = {}  # id(signature) -> (the signature, its plan)


def _plan(sig: inspect.Signature) -> _Plan | None:
    known = _PLANS.get(id(sig))
    if known is not None and known[0] is sig:
        return known[1]
    params = sig.parameters.values()
    plan: _Plan | None = None
    if all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params):
        positional = tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)
        defaults = {p.name: p.default for p in params if p.default is not p.empty}
        plan = (positional, frozenset(sig.parameters), defaults)
    _PLANS[id(sig)] = (sig, plan)
    return plan


def read_call(sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The call's arguments by parameter name (defaults filled in), or None when they do not fit ``sig``.

    What ``sig.bind_partial`` and ``apply_defaults`` give, without them for a call that plainly fits (every hooked
    load reads its call: binding costs ~10 us a call)."""
    if sig is None:
        return None
    plan = _plan(sig)
    if plan is not None:
        positional, accepted, defaults = plan
        given = positional[: len(args)]
        if len(args) <= len(positional) and accepted.issuperset(kwargs) and not any(name in kwargs for name in given):
            return {**defaults, **dict(zip(given, args, strict=True)), **kwargs}
    try:
        bound = sig.bind_partial(*args, **kwargs)
        bound.apply_defaults()
    except TypeError:
        return None
    return dict(bound.arguments)


def with_argument(
    sig: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any], name: str, value: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of a call :func:`read_call` read, with ``name`` (a parameter of ``sig``) set to ``value`` and
    every other argument as given."""
    plan = _plan(sig)
    if plan is not None:
        positional = plan[0]
        if name in positional[: len(args)]:
            at = positional.index(name)
            return (*args[:at], value, *args[at + 1 :]), kwargs
        return args, {**kwargs, name: value}
    bound = sig.bind_partial(*args, **kwargs)
    bound.arguments[name] = value
    return bound.args, bound.kwargs


def hooked(fn: Any) -> bool:
    return bool(getattr(fn, MARK, False))


def wrap(original: Callable[..., Any], body: Callable[..., Any]) -> Callable[..., Any]:
    """A hook: ``body(original, sig, args, kwargs)`` decides; it is marked so that it is never wrapped twice."""
    sig = signature(original)

    @functools.wraps(original)
    def hook(*args: Any, **kwargs: Any) -> Any:
        return body(original, sig, args, kwargs)

    setattr(hook, MARK, True)
    return hook


class Patcher:
    """Replaces attributes and remembers the originals, so that a half-done installation can be undone."""

    _ABSENT = object()

    def __init__(self) -> None:
        self.done: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, name: str, new: Any) -> None:
        old = vars(owner).get(name, self._ABSENT)  # a class attribute may be inherited: undo by deleting it
        setattr(owner, name, new)
        self.done.append((owner, name, old))

    def revert(self) -> None:
        while self.done:
            owner, name, old = self.done.pop()
            try:
                if old is self._ABSENT:
                    delattr(owner, name)
                else:
                    setattr(owner, name, old)
            except Exception:  # pragma: no cover - best effort
                pass


def unreadable(call: str) -> None:
    """Say once that a call to kernels' ``call`` could not be read and was passed on unpinned."""
    from kernlock.environments.compat import INSTALL_KERNELS
    from kernlock.runtime import policy

    policy.warn_once(
        f"unreadable:{call}",
        f"could not read a call to kernels' {call}; it was passed on unchanged, so that load is not pinned by "
        f"kernels.lock. Install a pair kernlock was tested with: {INSTALL_KERNELS}.",
    )


def hook_version_ref(original: Callable[..., Any]) -> Callable[..., Any]:
    """``kernels._versions.resolve_version_spec_as_ref(repo_id, version_spec, ...)`` -> the locked commit as the
    ``GitRefInfo`` the callers read ``target_commit`` of (kernels 0.15, 0.16 and 0.17 alike), without a request."""

    def body(
        original: Callable[..., Any], sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        from kernlock.runtime import policy

        call = read_call(sig, args, kwargs) if policy.active() else None
        repo, version = (call or {}).get("repo_id"), (call or {}).get("version_spec")
        if not isinstance(repo, str) or not isinstance(version, int):
            return original(*args, **kwargs)
        entry = policy.locked_entry(repo, f"version={version}")
        if entry is None:
            return original(*args, **kwargs)
        policy.note_version(repo, version, entry)
        from huggingface_hub.hf_api import GitRefInfo

        return GitRefInfo(name=entry.ref, ref=f"refs/heads/{entry.ref}", target_commit=entry.commit)

    return wrap(original, body)


def clear_revision_caches() -> None:
    """``LayerRepository._resolve_revision`` / ``FuncRepository._resolve_revision`` are lru caches: revisions
    resolved before activation must not survive it."""
    for module, path in (
        ("kernels.layer.layer", "LayerRepository._resolve_revision"),
        ("kernels.layer.func", "FuncRepository._resolve_revision"),
    ):
        clear = getattr(find(module, path), "cache_clear", None)
        if callable(clear):
            clear()
