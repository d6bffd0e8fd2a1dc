"""Frozen, keyword-only, slotted value classes without code generation at import.

``@value`` gives a class what ``@dataclass(frozen=True, kw_only=True, slots=True)`` gives it (``__init__`` taking
each annotated field by keyword, defaults, ``__post_init__``, ``__eq__``, ``__hash__``, ``__repr__``, ``order``)
from methods written once here. A dataclass compiles seven or more functions per class when its module is
imported (about a millisecond each class); kernlock defines a dozen such values on the path of every command and
before the first kernel load, where that time is what users wait for (issue 12). Type checkers see the decorator
as a dataclass transform, so constructions are checked as they are for a dataclass.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, cast, dataclass_transform

__all__ = ["MISSING", "FrozenInstanceError", "field", "fields", "is_value", "replace", "value"]

T = TypeVar("T")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: The default of a field that has none.
MISSING: Any = _Missing()


class FrozenInstanceError(AttributeError):
    """A field of a value was assigned or deleted."""


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def field(*, default_factory: Callable[[], T]) -> T:
    """A default made anew for each value (``requirements: dict[str, X] = field(default_factory=dict)``)."""
    return cast(T, _Factory(default_factory))


class _Value:
    """The methods every value shares; ``_fields`` and ``_defaults`` are set by :func:`value`."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, **values: Any) -> None:
        put = object.__setattr__
        for name in self._fields:
            item = values.pop(name, MISSING)
            if item is MISSING:
                item = self._defaults.get(name, MISSING)
                if item is MISSING:
                    raise TypeError(f"{type(self).__name__}() missing keyword argument {name!r}")
                if type(item) is _Factory:
                    item = item.make()
            put(self, name, item)
        if values:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword arguments {', '.join(map(repr, values))}")
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    def _key(self) -> tuple[Any, ...]:  # replaced per class by a C-level getter of its fields (see value())
        return tuple([getattr(self, name) for name in self._fields])

    def __setattr__(self, name: str, item: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__qualname__}({shown})"

    def __getstate__(self) -> tuple[Any, ...]:
        return self._key()

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, item in zip(self._fields, state, strict=True):
            object.__setattr__(self, name, item)


class _Ordered(_Value):
    """A value ordered by its fields, in declaration order (``@value(order=True)``)."""

    __slots__ = ()

    def __lt__(self, other: object) -> bool:
        return self._key() < other._key() if type(other) is type(self) else NotImplemented

    def __le__(self, other: object) -> bool:
        return self._key() <= other._key() if type(other) is type(self) else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self._key() > other._key() if type(other) is type(self) else NotImplemented

    def __ge__(self, other: object) -> bool:
        return self._key() >= other._key() if type(other) is type(self) else NotImplemented


@dataclass_transform(kw_only_default=True, frozen_default=True, eq_default=True, field_specifiers=(field,))
def value(cls: type[T] | None = None, *, order: bool = False) -> Any:
    """Make ``cls`` a frozen, keyword-only, slotted value of its annotated fields (``@value`` or
    ``@value(order=True)``); a class attribute of a field's name is its default."""

    def make(cls: type[T]) -> type[T]:
        annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - inspect costs ~15 ms to import
        names = tuple(name for name, kind in annotations.items() if not str(kind).startswith("ClassVar"))
        body = {k: v for k, v in cls.__dict__.items() if k not in names and k not in ("__dict__", "__weakref__")}
        defaults = {name: cls.__dict__[name] for name in names if name in cls.__dict__}
        body.update(__slots__=names, _fields=names, _defaults=defaults)
        if len(names) > 1:  # eq, hash and order compare these tuples: built in C (a lock sorts thousands of files)
            getter = operator.attrgetter(*names)
            body["_key"] = lambda self: getter(self)
        bases = (*(base for base in cls.__bases__ if base is not object), _Ordered if order else _Value)
        return cast("type[T]", type(cls.__name__, bases, body))

    return make if cls is None else make(cls)


def fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """``(name, default)`` of each field of a value class, in declaration order (default :data:`MISSING`; a
    :func:`field` default as the value its factory makes)."""
    values = cast("type[_Value]", cls)
    defaults = {name: item.make() if type(item) is _Factory else item for name, item in values._defaults.items()}
    return tuple((name, defaults.get(name, MISSING)) for name in values._fields)


def is_value(item: object) -> bool:
    """Whether ``item`` is an instance of a ``@value`` class."""
    return isinstance(item, _Value)


def replace(item: T, **changes: Any) -> T:
    """A copy of the value ``item`` with ``changes`` (checked again by its ``__post_init__``)."""
    current = {name: getattr(item, name) for name in cast(_Value, item)._fields}
    return type(item)(**{**current, **changes})
