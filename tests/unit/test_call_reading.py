"""A hook reads the calls it intercepts by parameter name: its fast reading must agree with ``inspect``'s binding
for every call, fitting or not, and setting one argument must change nothing else the function receives."""

from __future__ import annotations

import inspect
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kernlock.runtime.loaders._common import read_call, with_argument

NAMES = ("repo_id", "revision", "backend", "user_agent", "repo_info", "variant_path")
KINDS = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
)


@st.composite
def signatures(draw: st.DrawFn) -> inspect.Signature:
    """A signature of up to six named parameters (positional-only, positional-or-keyword, keyword-only, in that
    order, with defaults where Python allows them) and maybe ``*args`` / ``**kwargs``."""
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=6))
    kinds = sorted(draw(st.lists(st.sampled_from(KINDS), min_size=len(names), max_size=len(names))))
    params: list[inspect.Parameter] = []
    defaulted = False
    for name, kind in zip(names, kinds, strict=True):
        default = draw(st.sampled_from([inspect.Parameter.empty, None, 0]))
        if kind is not inspect.Parameter.KEYWORD_ONLY and defaulted:
            default = None  # after a default, every positional parameter has one
        defaulted = defaulted or (default is not inspect.Parameter.empty and kind is not inspect.Parameter.KEYWORD_ONLY)
        params.append(inspect.Parameter(name, kind, default=default))
    if draw(st.booleans()):
        at = sum(1 for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY)
        params.insert(at, inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL))
    if draw(st.booleans()):
        params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


calls = st.tuples(
    st.lists(st.integers(), max_size=7).map(tuple),
    st.dictionaries(st.sampled_from((*NAMES, "unknown")), st.integers(), max_size=4),
)


def _bound(sig: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    try:
        bound = sig.bind_partial(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


@settings(max_examples=400, deadline=None)
@given(sig=signatures(), call=calls)
def test_reading_a_call_agrees_with_binding_it(sig: inspect.Signature, call: tuple[tuple[Any, ...], dict[str, Any]]):
    args, kwargs = call
    for _ in range(2):  # the second reading uses what the first one learnt of the signature
        assert read_call(sig, args, kwargs) == _bound(sig, args, kwargs)


@settings(max_examples=400, deadline=None)
@given(sig=signatures(), call=calls, value=st.integers())
def test_setting_an_argument_changes_only_that_argument(
    sig: inspect.Signature, call: tuple[tuple[Any, ...], dict[str, Any]], value: int
):
    args, kwargs = call
    read = read_call(sig, args, kwargs)
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [p.name for p in sig.parameters.values() if p.kind in plain]
    if read is None or not named:
        return
    name = named[0]
    new_args, new_kwargs = with_argument(sig, args, kwargs, name, value)
    assert read_call(sig, new_args, new_kwargs) == {**read, name: value}
