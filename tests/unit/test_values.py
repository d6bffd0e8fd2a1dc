"""kernlock's values are standard-library dataclasses of one style: frozen, slotted, keyword-only, checked again on
every construction and ``replace``, and the same after pickle and copy."""

from __future__ import annotations

import ast
import copy
import dataclasses
import pickle
from pathlib import Path

import pytest

from kernlock.lock.model import LockedFile
from kernlock.project.inputs import Project

ROOT = Path(__file__).resolve().parents[2]
_HASH = "git-sha1:" + "0" * 40


def _decorators() -> list[tuple[str, str]]:
    """``(module:class, decorator source)`` of every class decorated with ``dataclass`` in kernlock."""
    found = []
    for path in sorted((ROOT / "kernlock").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for deco in node.decorator_list:
                    text = ast.unparse(deco)
                    if text.startswith(("dataclass", "dataclasses.dataclass")):
                        found.append((f"{path.relative_to(ROOT)}:{node.name}", text))
    return found


def test_every_value_class_is_a_slotted_keyword_only_dataclass():
    decorated = _decorators()
    assert len(decorated) > 40  # the lock model, variant types, project, hub answers, wire, reports...
    odd = [(where, text) for where, text in decorated if "slots=True" not in text or "kw_only=True" not in text]
    assert odd == []


def test_fields_are_keyword_only_required_and_frozen():
    with pytest.raises(TypeError):
        LockedFile("a.py", 3, _HASH)  # type: ignore[misc]
    with pytest.raises(TypeError, match="hash"):
        LockedFile(path="a.py", size=3)  # type: ignore[call-arg]
    locked = LockedFile(path="a.py", size=3, hash=_HASH)
    with pytest.raises(dataclasses.FrozenInstanceError):
        locked.size = 4  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):  # TypeError from the frozen __setattr__ before Python 3.14
        locked.other = 2  # type: ignore[attr-defined]
    assert not hasattr(locked, "__dict__")


def test_post_init_checks_every_construction_and_replace():
    with pytest.raises(ValueError):
        LockedFile(path="../a.py", size=3, hash=_HASH)
    locked = LockedFile(path="a.py", size=3, hash=_HASH)
    assert dataclasses.replace(locked, size=4) == LockedFile(path="a.py", size=4, hash=_HASH)
    assert locked.size == 3  # unchanged
    with pytest.raises(ValueError):
        dataclasses.replace(locked, path="../a.py")


def test_values_are_ordered_and_hashed_by_their_fields():
    a, b = LockedFile(path="a.py", size=3, hash=_HASH), LockedFile(path="b.py", size=1, hash=_HASH)
    assert sorted([b, a]) == [a, b] and a < b and len({a, b, LockedFile(path="a.py", size=3, hash=_HASH)}) == 2


def test_values_survive_pickle_and_copy():
    locked = LockedFile(path="a/b.py", size=3, hash=_HASH)
    for again in (pickle.loads(pickle.dumps(locked)), copy.copy(locked), copy.deepcopy(locked)):
        assert again == locked and type(again) is LockedFile


def test_a_default_factory_makes_a_new_default_for_each_value():
    first, second = Project(root=Path("a")), Project(root=Path("b"))
    assert first.requirements == {} and first.requirements is not second.requirements
