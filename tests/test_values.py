"""kernlock.values: what ``@dataclass(frozen=True, kw_only=True, slots=True)`` gives, checked against it."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from kernlock import values
from kernlock.lockmodel import LockedFile
from kernlock.values import FrozenInstanceError, value


@value(order=True)
class Point:
    x: int
    y: int = 0

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError("x is negative")


@dataclasses.dataclass(frozen=True, order=True, kw_only=True, slots=True)
class DataPoint:
    x: int
    y: int = 0


def test_a_value_behaves_as_the_frozen_slotted_dataclass_does():
    pairs = [(Point(x=x, y=y), DataPoint(x=x, y=y)) for x, y in [(1, 2), (1, 0), (0, 5), (2, 2), (1, 2)]]
    for a, da in pairs:
        assert repr(a) == repr(da).replace("DataPoint", "Point")
        assert not hasattr(a, "__dict__")
        for b, db in pairs:
            assert (a == b) == (da == db)
            assert (a < b, a <= b, a > b, a >= b) == (da < db, da <= db, da > db, da >= db)
            assert (hash(a) == hash(b)) == (hash(da) == hash(db))
    assert sorted(p for p, _ in pairs) == [Point(x=d.x, y=d.y) for d in sorted(d for _, d in pairs)]
    assert Point(x=1) == Point(x=1, y=0)
    assert Point(x=1) != DataPoint(x=1)  # another class is never equal
    assert values.fields(Point) == (("x", values.MISSING), ("y", 0))


def test_fields_are_keyword_only_required_and_frozen():
    with pytest.raises(TypeError):
        Point(1, 2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing keyword argument 'x'"):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword arguments 'z'"):
        Point(x=1, z=3)  # type: ignore[call-arg]
    point = Point(x=1)
    with pytest.raises(FrozenInstanceError):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del point.x  # type: ignore[misc]
    with pytest.raises(AttributeError):
        point.z = 2  # type: ignore[attr-defined]
    assert point.x == 1


def test_post_init_checks_every_construction_and_replace():
    with pytest.raises(ValueError, match="negative"):
        Point(x=-1)
    point = Point(x=1, y=2)
    assert values.replace(point, y=3) == Point(x=1, y=3)
    assert point == Point(x=1, y=2)  # unchanged
    with pytest.raises(ValueError, match="negative"):
        values.replace(point, x=-1)


def test_values_survive_pickle_and_copy():
    locked = LockedFile(path="a/b.py", size=3, hash="git-sha1:" + "0" * 40)
    for again in (pickle.loads(pickle.dumps(locked)), copy.copy(locked), copy.deepcopy(locked)):
        assert again == locked and type(again) is LockedFile
    assert values.is_value(locked) and not values.is_value(DataPoint(x=1))


@value
class Bag:
    items: dict[str, int] = values.field(default_factory=dict)


def test_a_default_factory_makes_a_new_default_for_each_value():
    first, second = Bag(), Bag()
    first.items["a"] = 1
    assert second.items == {} and first.items is not second.items
    assert values.fields(Bag) == (("items", {}),)
