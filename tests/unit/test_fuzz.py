"""Property-based fuzzing (hypothesis) of the four readers: kernels.lock, pyproject.toml, specs, environments.

Whatever a reader is given, the only exception that may escape is a KernlockError (the CLI turns it into a clear
`error:` line; anything else is a traceback), its message renders, and every document it accepts round-trips
through the writer byte-identically.

Budget: every reader sees at least ``MIN_DOCUMENTS`` generated documents per run, the documents of its tests
added up. Hypothesis spends about 0.3 ms on each example whatever it holds, so most examples are batches of
documents of a fixed size (``max_examples * batch`` documents; a failing batch shrinks its passing documents to
the simplest ones). Each test counts the documents it feeds its reader in ``COUNTS``; the last test of the module
checks the budget and prints the counts (``pytest -s tests/unit/test_fuzz.py`` shows them). Runs are derandomized (the
same examples on every run: CI is reproducible) and use no example database.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import pytest
import tomlkit
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lock_strategies import (
    ENVS,
    REFS,
    REPOS,
    VARIANT_NAMES,
    draw_index,
    ints,
    mostly,
    pick,
    pool_file_sets,
    valid_locks,
)

from kernlock.environments.environment import Environment
from kernlock.errors import EnvironmentStringError, KernlockError, LockError, ProjectError, SpecError
from kernlock.lock import file as lockfile
from kernlock.lock.model import Lock
from kernlock.project import edit as pyproject_edit
from kernlock.project import inputs as project
from kernlock.project.inputs import Spec
from kernlock.util import names
from kernlock.variants import grammar as variants

MIN_DOCUMENTS = 10_000
#: Documents fed to each reader in this run (and how many of them it accepted), filled in by the tests below.
COUNTS: Counter[str] = Counter()
#: The tests whose examples add up to each reader's budget (see test_zz_every_reader_saw_its_budget).
READER_TESTS = {
    "lock": {"test_lock_writer_output_reads_back_exactly", "test_mutated_lock_is_refused_or_round_trips"},
    "pyproject": {
        "test_generated_pyproject_is_refused_or_edits_cleanly",
        "test_mutated_pyproject_is_refused_or_edits_cleanly",
    },
    "spec": {"test_spec_parser"},
    "environment": {"test_environment_parser"},
}
RAN: set[str] = set()

FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# -- mutations ---------------------------------------------------------------------------------------------------

#: `key = value` in a TOML line or inline table: the value, up to a comma, a closing brace or the end of the line.
_VALUE = re.compile(r'(?<=[\w"-] = )("(?:[^"\\\n]|\\.)*"|\[[^\n]*\]|[^,}\n]+)')
#: Characters an insertion or a flip favours (any other character may come too).
_AWKWARD = "\"\\\n\r\t[]{}=,#'. 0a-_/\x00\x7f\x85\u2028\ufeffé🚀"
JSON_LOCK = '{\n  "kernels-community/activation": {"revision": "v1"}\n}\n'
DEEP = "[" * 3000 + "]" * 3000


def hostile_values(*extra: str) -> tuple[str, ...]:
    """TOML values an attacker or a careless edit may put anywhere: paths that leave their folder, bad sizes,
    bad commits and names, wrong types, awkward strings."""
    return (
        *extra,
        '"/etc/passwd"',
        '"../../../../outside"',
        '"a/../b"',
        '"./x.py"',
        '""',
        '"a//b"',
        r'"__init__\u0000.py"',
        r'"a\\b.py"',
        r'"C:\\x"',
        '"__pycache__/x.pyc"',
        '"x/"',
        "-1",
        "0",
        "1099511627776",
        "1099511627777",
        "1125899906842624",
        "99999999999999999999999999",
        "true",
        "1.5",
        "inf",
        "nan",
        "-0",
        "+1",
        "0x10",
        "1_000",
        "1e3",
        '"12"',
        '"ZZZ"',
        '"' + "A" * 40 + '"',
        '"' + "a" * 39 + '"',
        '"' + "e" * 40 + '"',
        '"torch999-bogus"',
        '"torch-cuda"',
        '"torch-universal"',
        '"torch213-cxx11-cpu-x86_64-linux "',
        '"Torch213-cxx11-cpu-x86_64-linux"',
        '"torch213-cpu-x86_64-linux"',
        '"torch212-cxx11-cu128-x86_64-linux"',
        '"torch2' + "1" * 5000 + '-cxx11-cpu-x86_64-linux"',
        "[]",
        '["a", 1]',
        '[["x"]]',
        "{}",
        "{ a = 1 }",
        "1979-05-27T07:32:00Z",
        "1979-02-30",
        '"""multi\nline"""',
        "'literal'",
        '"sha256:' + "0" * 64 + '"',
        '"sha256:' + "g" * 64 + '"',
        '"git-sha1:' + "0" * 40 + '"',
        '"md5:d41d8cd98f00b204e9800998ecf8427e"',
        '"kernels--community/x"',
        '"a/b/c"',
        '"A/B"',
        '"a/b"',
        '"' + "x" * 2000 + '"',
        '"v1"',
        '"v1.lock"',
        '"-x"',
        '"kernels-0.18"',
        '"kernels-0.17 "',
        '"kernlock"',
        '"1"',
        '"2"',
        '"🚀"',
        r'"\ud800"',
        r'"\U0010FFFF"',
        DEEP,
    )


LOCK_VALUES = hostile_values()
LOCK_LINES = (
    'script = "rm -rf /"',
    "[[kernel]]",
    "[[kernel.variant]]",
    "[kernel]",
    "<<<<<<< HEAD",
    "=======",
    ">>>>>>> branch",
    'lock-version = "1"',
    "lock-version = 2",
    'content-hash = "sha256:' + "0" * 64 + '"',
    "environments = []",
    "files = []",
    '{path = "x.py", size = 1, hash = "git-sha1:' + "a" * 40 + '"},',
    '{path = "../x.py", size = 1, hash = "git-sha1:' + "a" * 40 + '"},',
    "# a comment",
    "",
    "kernel = []",
    'required-by = ["a/b"]',
    'name = "torch-universal"',
    "a.b.c = 1",
    "x = " + DEEP,
)


_KINDS = st.sampled_from(
    ("value", "value", "value", "delete", "duplicate", "swap", "line", "flip", "insert", "cut", "whole")
)
_CHAR = st.one_of(st.sampled_from(_AWKWARD), st.characters(exclude_categories=("Cs",)))
_CHARS = st.text(_CHAR, min_size=1, max_size=4)


def mutate(draw: st.DrawFn, text: str, values: tuple[str, ...], lines: tuple[str, ...]) -> str:
    """``text`` after 1-3 edits: lines deleted, duplicated, swapped or inserted, characters flipped, inserted or
    deleted, a value replaced by a hostile one, the whole text replaced or re-encoded."""
    for _ in range(draw(ints(1, 3))):
        rows = text.split("\n")
        kind = draw(_KINDS)
        if kind == "value":
            spans = list(_VALUE.finditer(text))
            if spans:
                span = spans[draw_index(draw, len(spans))]
                text = text[: span.start()] + pick(draw, values) + text[span.end() :]
        elif kind == "delete":
            del rows[draw_index(draw, len(rows))]
            text = "\n".join(rows)
        elif kind == "duplicate":
            i = draw_index(draw, len(rows))
            rows.insert(i, rows[i])
            text = "\n".join(rows)
        elif kind == "swap":
            i, j = draw_index(draw, len(rows)), draw_index(draw, len(rows))
            rows[i], rows[j] = rows[j], rows[i]
            text = "\n".join(rows)
        elif kind == "line":
            rows.insert(draw_index(draw, len(rows) + 1), pick(draw, lines))
            text = "\n".join(rows)
        elif kind == "flip":
            i = draw_index(draw, len(text) + 1)
            text = text[:i] + draw(_CHAR) + text[i + 1 :]
        elif kind == "insert":
            i = draw_index(draw, len(text) + 1)
            text = text[:i] + draw(_CHARS) + text[i:]
        elif kind == "cut":
            i = draw_index(draw, len(text) + 1)
            text = text[:i] + text[i + draw(ints(1, 40)) :]
        else:
            text = pick(
                draw,
                (
                    text.replace("\n", "\r\n"),
                    text.rstrip("\n"),
                    text + "\n",
                    "\ufeff" + text,
                    text[: len(text) // 2],
                    "",
                    JSON_LOCK,
                    f"<<<<<<< HEAD\n{text}=======\n{text}>>>>>>> branch\n",
                ),
            )
    return text


def rehash(text: str) -> str:
    """Recompute the content-hash, as an attacker or a careless tool would, so that validation is reached."""
    return re.sub(r'content-hash = "[^"]*"', f'content-hash = "{lockfile.content_hash(text)}"', text)


def refused(err: KernlockError, *kinds: type[KernlockError]) -> None:
    """The error is of the reader's kind and its message renders (the CLI prints it)."""
    assert isinstance(err, kinds), f"{type(err).__name__}: {err}"
    assert str(err)


# -- kernels.lock ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@settings(FUZZ, max_examples=1_250)
@given(valid_locks())
@example(Lock(requires_hash="sha256:" + "0" * 64, environments=(), kernels=()))  # a project without kernels
def test_lock_writer_output_reads_back_exactly(lock: Lock):
    """A valid lock's text reads back (strictly and loosely) as the same lock in canonical order, and the writer
    gives the same bytes for it."""
    RAN.add("test_lock_writer_output_reads_back_exactly")
    COUNTS["lock"] += 1
    text = lockfile.dumps(lock)
    text.encode("utf-8")  # what write() stores
    parsed = lockfile.loads(text)
    assert parsed == lockfile.normalized(lock)
    assert lockfile.dumps(parsed) == text
    assert lockfile.loads(text, canonical=False) == parsed
    COUNTS["lock accepted"] += 1


@st.composite
def mutated_lock_batches(draw: st.DrawFn, size: int) -> list[str]:
    """``size`` mutations of one rendered valid lock, about half with the content-hash recomputed."""
    base = lockfile.dumps(draw(valid_locks(pool_file_sets)))
    texts = []
    for _ in range(size):
        text = mutate(draw, base, LOCK_VALUES, LOCK_LINES)
        texts.append(rehash(text) if draw(ints(0, 1)) else text)
    return texts


@pytest.mark.slow
@settings(FUZZ, max_examples=1_100)
@given(mutated_lock_batches(size=8))
# Found by this test: tomllib recursed into a RecursionError on deeply nested arrays (loads now says LockError).
@example(["x = " + "[" * 3000 + "]" * 3000 + "\n"])
def test_mutated_lock_is_refused_or_round_trips(texts: list[str]):
    RAN.add("test_mutated_lock_is_refused_or_round_trips")
    for text in texts:
        check_lock_text(text)


def check_lock_text(text: str) -> None:
    """Strict reading (the CLI) refuses with LockError or accepts exactly the bytes the writer makes; loose reading
    (run-time activation) also accepts other layouts with a matching content-hash, and what it accepts the writer
    writes and the strict reader reads back (in canonical order)."""
    COUNTS["lock"] += 1
    strict = loose = None
    try:
        strict = lockfile.loads(text, "kernels.lock")
    except KernlockError as err:
        refused(err, LockError)
    else:
        assert lockfile.dumps(strict) == text
        COUNTS["lock accepted"] += 1
    try:
        loose = lockfile.loads(text, "kernels.lock", canonical=False)
    except KernlockError as err:
        refused(err, LockError)
        assert strict is None
    else:
        assert strict is None or loose == strict
        assert lockfile.loads(lockfile.dumps(loose)) == lockfile.normalized(loose)
        COUNTS["lock accepted loosely"] += 1


#: Any text, lone surrogates included (st.text() never draws them).
any_text = st.lists(mostly(st.characters(), st.characters(categories=["Cs"]), 20), min_size=1, max_size=12).map("".join)


@pytest.mark.slow
@settings(FUZZ, max_examples=300)
@given(st.lists(any_text, min_size=10, max_size=10))
# Found by this test: a lone surrogate (which a JSON answer of the Hub can hold) passed check_path, and dumps() then
# raised UnicodeEncodeError (check_path now refuses surrogates).
@example(["a\udc80.py", "\ud800"])
def test_file_paths_the_lock_model_accepts_are_written_and_read_back(parts: list[str]):
    """Every file path check_path accepts (so that a LockedFile holds it) is UTF-8 text that a lock's
    `{path = ...}` entry writes and reads back unchanged."""
    for part in parts:
        for path in (part, f"a/{part}"):
            try:
                names.check_path(path)
            except ValueError as err:
                assert str(err)
                continue
            path.encode("utf-8")
            entry = tomlkit.inline_table()
            entry.update({"path": path, "size": 1, "hash": "git-sha1:" + "0" * 40})
            assert tomllib.loads(tomlkit.dumps({"files": [entry]}))["files"][0]["path"] == path


# -- pyproject.toml ----------------------------------------------------------------------------------------------

PYPROJECT_REPOS = (
    "kernels-community/activation",
    "Kernels-Community/Activation",
    "kernels-community/flash-attn3",
    "a/b",
    "x_/y_",
    "../x",
    "a/b/c",
    "a",
    "",
    "kernels--community/x",
    "org/na me",
    "ünï/cödé",
    "a/b\x00",
)
PYPROJECT_REVS = ("v1", "v2", "main", "release/1.0", "a" * 40, "v 1", "", "../x", "-x", "v1.lock", "x" * 300, "🚀")
WHENS = (
    "cuda == 12.8",
    "torch >= 2.10",
    "os == linux and arch == x86_64",
    "rocm != 6.3",
    "cuda >= twelve",
    "os < linux",
    "gpu == 1",
    "",
    " and ",
    "torch >= 2." + "1" * 5000,
)
GARBLED_ENVS = (
    "torch213-cxx11-cpu-x86_64-linuxx",
    "torch213-cpu-x86_64-linux",
    "torch212-cxx11-cpu-aarch64-darwin",
    "Torch213-cxx11-cpu-x86_64-linux",
    "torch-universal",
    "torch2.13-cxx11-cu12.8-x86_64-linux",
    " torch213-cxx11-cpu-x86_64-linux ",
    "",
    "torch2" + "1" * 5000 + "-cxx11-cpu-x86_64-linux",
)
#: Values of the wrong type (few, so that hypothesis's search for novel examples does not dwell on them).
_WRONG_TYPES = (0, -1, 2**70, 1.5, float("inf"), True, False, "", "x", [], [1, "a"], {}, {"a": 1})
junk = st.one_of(st.sampled_from(_WRONG_TYPES), st.dates(), st.text(max_size=4))


@st.composite
def _dicts(draw: st.DrawFn, fields: dict[str, tuple[int, st.SearchStrategy[Any]]]) -> dict[str, Any]:
    """A dict holding each key with the chance given (in 64ths), in the order given."""
    return {key: draw(value) for key, (chance, value) in fields.items() if draw(ints(1, 64)) > 64 - chance}


revs = mostly(st.sampled_from(PYPROJECT_REVS[:5]), st.one_of(st.sampled_from(PYPROJECT_REVS), junk), 4)
pin_tables = _dicts(
    {
        "rev": (64, revs),
        "when": (32, mostly(st.sampled_from(WHENS[:4]), st.one_of(st.sampled_from(WHENS), junk), 3)),
        "trust": (24, mostly(st.booleans(), junk, 4)),
    }
)
odd_pin_tables = _dicts({"rev": (48, revs), "when": (32, junk), "trust": (32, junk), "extra": (24, st.just("x"))})
requirements = mostly(
    st.one_of(revs, pin_tables, st.lists(pin_tables, min_size=1, max_size=3)),
    st.one_of(odd_pin_tables, st.lists(st.one_of(odd_pin_tables, junk), max_size=3), junk),
    5,
)
#: Declared facts of environment tables (kernlock.environments.facts): mostly valid, sometimes wrong or misplaced.
FACTS = {
    "cuda-capabilities": (
        16,
        mostly(st.sampled_from([["9.0"], ["8.0", "10.0"]]), st.sampled_from([["sm90"], [9.0], []]), 4),
    ),
    "python": (16, mostly(st.sampled_from(["3.12", "3.13t", "3.15t"]), st.sampled_from([3.13, "3.13T", "py3"]), 4)),
    "tvm-ffi": (8, mostly(st.sampled_from(["0.1", "0.1.4"]), junk, 4)),
    "kernels": (16, mostly(st.sampled_from(["0.17.2", "0.16.2"]), junk, 4)),
    "macos": (8, mostly(st.sampled_from(["15.0", "26.1"]), junk, 4)),
    "cuda_capabilities": (1, st.just(["9.0"])),
}
env_tables = _dicts({"name": (60, mostly(st.sampled_from(ENVS), junk, 8)), **FACTS})
env_entries = mostly(st.sampled_from(ENVS), env_tables, 3)
kernlock_tables = _dicts(
    {
        "environments": (
            48,
            mostly(
                st.lists(env_entries, min_size=1, max_size=3, unique_by=repr),
                st.one_of(st.lists(st.sampled_from(ENVS + GARBLED_ENVS), max_size=3), junk),
                4,
            ),
        ),
        "kernels": (
            56,
            mostly(
                st.dictionaries(st.sampled_from(PYPROJECT_REPOS[:5]), requirements, min_size=1, max_size=3),
                st.one_of(st.dictionaries(st.sampled_from(PYPROJECT_REPOS), requirements, max_size=3), junk),
                5,
            ),
        ),
        "extra": (2, st.just("x")),
    }
)
pyproject_dicts = _dicts(
    {
        "project": (32, st.just({"name": "demo", "version": "0.1.0"})),
        "tool": (
            56,
            mostly(
                _dicts(
                    {
                        "ruff": (16, st.just({"line-length": 120})),
                        "kernlock": (64, mostly(kernlock_tables, junk, 10)),
                        "other": (8, junk),
                    }
                ),
                junk,
                20,
            ),
        ),
        "dependencies": (8, junk),
    }
)
comments = st.text(st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp")), max_size=10)


def _inline(value: Any) -> Any:
    if isinstance(value, dict):
        table = tomlkit.inline_table()
        for key, item in value.items():
            table[key] = _inline(item)
        return table
    if isinstance(value, list):
        array = tomlkit.array()
        array.extend(_inline(item) for item in value)
        return array
    return value


def _render(draw: st.DrawFn, value: Any) -> Any:
    """``value`` as tomlkit items, each table as a [section] or an inline table, each list of tables as [[...]]
    or an inline array, with comments here and there (the choices drawn)."""
    if isinstance(value, dict) and draw(ints(0, 3)) < 3:
        table = tomlkit.table()
        if draw(ints(0, 1)):
            table.add(tomlkit.comment(draw(comments)))
        for key, item in value.items():
            table[key] = _render(draw, item)
        return table
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value) and draw(ints(0, 1)):
        aot = tomlkit.aot()
        for item in value:
            aot.append(_section(item))
        return aot
    item = tomlkit.item(_inline(value))
    if isinstance(item, tomlkit.items.Array) and draw(ints(0, 1)):
        item.multiline(True)
    return item


def _section(value: dict[str, Any]) -> Any:
    table = tomlkit.table()
    for key, item in value.items():
        table[key] = _inline(item)
    return table


@st.composite
def generated_pyprojects(draw: st.DrawFn) -> str:
    doc = tomlkit.document()
    if draw(ints(0, 1)):
        doc.add(tomlkit.comment(draw(comments)))
    for key, value in draw(pyproject_dicts).items():
        doc[key] = _render(draw, value)
    return tomlkit.dumps(doc)


#: A memory file system where there is one: fsync and removal on a disk cost milliseconds per document.
FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


#: A requirement `kernlock add` may record: (repo, rev, trusted by hand); the repo may be a case twin of one there.
additions = st.tuples(
    st.sampled_from((*REPOS, "KERNELS-COMMUNITY/ACTIVATION", "A/B")), st.sampled_from((*REFS, "a" * 40)), st.booleans()
)


def record(loaded: project.Project, revs: dict[str, tuple[str, bool]]) -> bool:
    """``set_requirements``: True when written; False when it refused (ProjectError) a layout it cannot edit
    without moving other settings, in which case the file must be as it was."""
    before = loaded.pyproject.read_bytes()
    try:
        pyproject_edit.set_requirements(loaded, revs)
    except KernlockError as err:
        refused(err, ProjectError)
        assert loaded.pyproject.read_bytes() == before
        COUNTS["pyproject edits refused"] += 1
        return False
    return True


def check_pyproject(text: str, addition: tuple[str, str, bool]) -> None:
    """Only a KernlockError escapes `load`; an accepted file survives a no-op edit byte-identically,
    re-recording the revisions it already has gives an equal project (and, a second time, the same bytes), and
    recording a new revision gives a file that reads back with it and everything else unchanged, and removing it
    again (named twice) one that reads back without it (each edit may instead raise ProjectError and leave the file
    untouched)."""
    COUNTS["pyproject"] += 1
    with tempfile.TemporaryDirectory(prefix="kernlock-fuzz-", dir=FAST_TMP) as folder:
        root = Path(folder)
        path = root / project.PYPROJECT
        path.write_bytes(text.encode())
        try:
            loaded = project.load(root)
        except KernlockError as err:
            refused(err, KernlockError)
            return
        COUNTS["pyproject accepted"] += 1
        pyproject_edit.set_requirements(loaded, {})
        pyproject_edit.remove_requirements(loaded, [])
        assert path.read_bytes() == text.encode()
        same = {
            repo: (req.pins[0].rev, req.trust)
            for repo, req in loaded.requirements.items()
            if len(req.pins) == 1 and req.pins[0].when is None
        }
        if same and record(loaded, same):
            assert project.load(root) == loaded
            written = path.read_bytes()
            pyproject_edit.set_requirements(loaded, same)
            assert path.read_bytes() == written  # recording the same revisions again changes nothing
        repo, rev, trust = addition
        if not record(loaded, {repo: (rev, trust)}):
            return
        edited = project.load(root)
        assert edited.requirements[repo] == project.Requirement(repo=repo, pins=(project.Pin(rev=rev),), trust=trust)
        assert edited.environments == loaded.environments
        others = {k: v for k, v in loaded.requirements.items() if k.casefold() != repo.casefold()}
        assert {k: v for k, v in edited.requirements.items() if k != repo} == others
        before = path.read_bytes()
        try:
            pyproject_edit.remove_requirements(edited, [repo, repo])  # as `kernlock remove org/name org/name` does
        except KernlockError as err:
            refused(err, ProjectError)
            assert path.read_bytes() == before
            COUNTS["pyproject edits refused"] += 1
            return
        removed = project.load(root)
        assert removed.requirements == others and removed.environments == loaded.environments


@pytest.mark.slow
@settings(FUZZ, max_examples=1_000)
@given(st.lists(st.tuples(generated_pyprojects(), additions), min_size=5, max_size=5))
# Found by this test (each fixed in kernlock/project/inputs.py or environment.py):
# - a no-op edit of a pyproject without [tool.kernlock.kernels] wrote that table (now nothing is written);
# - a `when` version past int()'s 4300-digit limit raised ValueError (Condition.parse now raises SpecError);
# - recording a repo that the file names in another letter case left both keys, which `load` refuses (now the
#   entry is replaced);
# - recording a revision where [tool] or [tool.kernlock] is an inline table raised ValueError from tomlkit (the
#   missing tables are now made inline there).
@example(
    [
        ("", ("a/b", "v1", False)),
        (
            '[tool.kernlock.kernels]\n"a/b" = { rev = "v1", when = "torch >= 2.' + "1" * 4301 + '" }\n',
            ("a/b", "v1", False),
        ),
        (
            '[tool.kernlock.kernels]\n"kernels-community/activation" = "v1"\n',
            ("Kernels-Community/Activation", "v1", False),
        ),
        ("tool = {kernlock = {}}\n", ("kernels-community/activation", "v1", False)),
        ("[tool]\nkernlock = {}\n", ("a/b", "v1", True)),
    ]
)
def test_generated_pyproject_is_refused_or_edits_cleanly(documents: list[tuple[str, tuple[str, str, bool]]]):
    RAN.add("test_generated_pyproject_is_refused_or_edits_cleanly")
    for text, addition in documents:
        check_pyproject(text, addition)


PYPROJECT_BASES = (
    '[project]\nname = "demo"\nversion = "0.1.0"\n\n[tool.kernlock]\n'
    'environments = ["torch213-cxx11-cpu-x86_64-linux", "torch212-cxx11-cu128-x86_64-linux"]\n\n'
    '[tool.kernlock.kernels]\n"kernels-community/activation" = "v1"\n"a/b" = { rev = "main", trust = true }\n',
    "# kernels for the demo\n[tool.kernlock.kernels]  # pinned\n"
    "'kernels-community/activation' = 'v1'  # the activation kernels\n"
    '"kernels-community/flash-attn3" = [\n  { rev = "v2", when = "cuda >= 12.8" },\n  { rev = "v1" },\n]\n'
    "\n[tool.ruff]\nline-length = 120\n",
    '[tool.kernlock]\nkernels = { "kernels-community/activation" = "v1" }\n',
    'tool.kernlock.environments = ["torch212-cpu-aarch64-darwin"]\ntool.kernlock.kernels."a/b" = "v1"\n',
    '[tool.kernlock.kernels."kernels-community/activation"]\nrev = "v1"\ntrust = true\n\n[tool.kernlock]\n'
    'environments = ["torch29-cxx11-rocm63-x86_64-linux"]\n',
    '[tool.kernlock.kernels]\n"a/b" = "v1"\n\n[tool.ruff]\nline-length = 120\n\n[tool.kernlock]\n'
    'environments = ["torch213-cpu-x86_64-windows"]\n',
    '[[tool.kernlock.kernels."a/b"]]\nrev = "v2"\nwhen = "os == linux"\n\n'
    '[[tool.kernlock.kernels."a/b"]]\nrev = "v1"\n',
    '[project]\nname = "demo"\n',
)
PYPROJECT_VALUES = hostile_values(
    *(f'"{w}"' for w in WHENS),
    '"torch2.' + "1" * 5000 + '"',
    '{ rev = "v1", trust = 1 }',
    '{ rev = "v1", when = 3 }',
    '[{ rev = "v1" }, "v2"]',
    '{ rev = "v1", when = "cuda == 12.8", trust = true }',
    '["torch213-cxx11-cpu-x86_64-linux", "torch213-cxx11-cpu-x86_64-linux"]',
)
PYPROJECT_LINES = (
    "[tool]",
    "tool = 1",
    "[tool.kernlock]",
    "[tool.kernlock.kernels]",
    "[[tool.kernlock]]",
    '"Kernels-Community/Activation" = "v2"',
    '"kernels-community/activation" = "v2"',
    'extra = "x"',
    "kernels = 1",
    'environments = ["torch213-cxx11-cpu-x86_64-linux"]',
    "<<<<<<< HEAD",
    ">>>>>>> branch",
    "# a comment",
    "",
    "x = " + DEEP,
)


@st.composite
def mutated_pyprojects(draw: st.DrawFn, size: int) -> list[tuple[str, tuple[str, str, bool]]]:
    return [
        (mutate(draw, pick(draw, PYPROJECT_BASES), PYPROJECT_VALUES, PYPROJECT_LINES), draw(additions))
        for _ in range(size)
    ]


@pytest.mark.slow
@settings(FUZZ, max_examples=1_000)
@given(mutated_pyprojects(size=5))
# Found by this test: `remove_requirements(project, ["a/b", "a/b"])` raised tomlkit's KeyError (now each repo is
# removed once) ...
@example([('[tool.kernlock.kernels]\n"a/b" = "v2"\n', ("a/b", "v1", False))])
# ... and in these layouts tomlkit put the new [tool.kernlock.kernels] header above `tool.x.y = 1`
# (which then moved into the kernels table) or wrote "a/b" twice; set_requirements now re-reads its output and
# refuses (ProjectError, file untouched) an edit that would change anything but the entries it records.
@example(
    [
        ('tool.kernlock.environments = ["torch212-cpu-aarch64-darwin"]\ntool.x.y = 1\n', ("a/b", "v1", False)),
        (
            '[[tool.kernlock.kernels."a/b"]]\nrev = "v2"\n[tool]\nwhen = "os == linux"\n\n'
            '[[tool.kernlock.kernels."a/b"]]\nrev = "v1"\n',
            ("a/b", "v1", False),
        ),
    ]
)
def test_mutated_pyproject_is_refused_or_edits_cleanly(documents: list[tuple[str, tuple[str, str, bool]]]):
    RAN.add("test_mutated_pyproject_is_refused_or_edits_cleanly")
    for text, addition in documents:
        check_pyproject(text, addition)


# -- specs -------------------------------------------------------------------------------------------------------

_NAME_ALPHABET = "abzAZ09_.-"
spec_parts = mostly(
    st.sampled_from(tuple(part for repo in REPOS for part in repo.split("/"))),
    st.one_of(
        st.text(_NAME_ALPHABET, max_size=6),
        st.sampled_from(("..", "--", "a--b", "a..b", "a.", "_a", "x" * 97, "ü", "a b", "a@b")),
    ),
    3,
)
spec_revs = mostly(
    st.sampled_from((*REFS, "a" * 40, "x" * 255)),
    st.one_of(st.text("v1.0_-+/@aZ ~^:", max_size=8), st.sampled_from(("x" * 256, "v1.lock", "a/.b", "v1/", "-v1"))),
    3,
)


@st.composite
def _near_specs(draw: st.DrawFn) -> str:
    """org/name[@rev], each part valid or nearly so, with stray separators and spaces now and then."""
    org, name, rev = draw(spec_parts), draw(spec_parts), draw(spec_revs)
    slash = pick(draw, ("/", "/", "/", "/", "", "//", "\\", "/x/"))
    at = pick(draw, ("", "@", "@", "@", "@@", " @"))
    before = pick(draw, ("", "", "", " ", "\t", "\n", "\u3000"))
    after = pick(draw, ("", "", "", " ", "\x00", "\n"))
    return f"{before}{org}{slash}{name}{at and at + rev}{after}"


near_specs = _near_specs()


@pytest.mark.slow
@settings(FUZZ, max_examples=1_000)
@given(st.lists(mostly(near_specs, st.text(), 3), min_size=10, max_size=10))
def test_spec_parser(texts: list[str]):
    RAN.add("test_spec_parser")
    for text in texts:
        check_spec(text)


def check_spec(text: str) -> None:
    """Only SpecError escapes; an accepted spec is a valid repo (and ref) and reads back from its own text."""
    COUNTS["spec"] += 1
    try:
        spec = Spec.parse(text)
    except KernlockError as err:
        refused(err, SpecError)
        return
    COUNTS["spec accepted"] += 1
    names.check_repo(spec.repo)
    if spec.rev is not None:
        names.check_ref(spec.rev)
    assert Spec.parse(f"{spec.repo}@{spec.rev}" if spec.rev else spec.repo) == spec


# -- environments and variant names ------------------------------------------------------------------------------

TOKENS = (
    "torch",
    "torch213",
    "cxx11",
    "cxx98",
    "cpu",
    "cu128",
    "cu12.8",
    "cuda12.8",
    "rocm63",
    "rocm6.3",
    "xpu20253",
    "metal",
    "x86_64",
    "x86-64",
    "arm64",
    "aarch64",
    "linux",
    "linuxx",
    "darwin",
    "macos",
    "windows",
    "stable",
    "abi210",
    "universal",
    "tvm",
    "ffi01",
    "pytorch2.13",
)


_ENV_EDITS = st.sampled_from(("swap", "drop", "duplicate", "insert", "digits", "case", "token"))
_DIGITS = st.one_of(st.text("0123456789", max_size=5), st.sampled_from(("0", "00", "9" * 5000)))
_SEPARATOR = mostly(st.just("-"), st.sampled_from(("_", " ", "--", "", ".", " - ")), 8)


@st.composite
def _mutated_environments(draw: st.DrawFn) -> str:
    """A real environment or variant name with 0-3 edits: parts swapped, dropped, duplicated or inserted, digits
    changed (also to very long runs), letter case, separators and surrounding spaces changed."""
    parts = pick(draw, VARIANT_NAMES).split("-")
    for _ in range(draw(ints(0, 3))):
        i, j = draw(ints(0, len(parts) - 1)), draw(ints(0, len(parts) - 1))
        kind = draw(_ENV_EDITS)
        if kind == "swap":
            parts[i], parts[j] = parts[j], parts[i]
        elif kind == "drop" and len(parts) > 1:
            del parts[i]
        elif kind == "duplicate":
            parts.insert(i, parts[i])
        elif kind == "insert":
            parts.insert(i, pick(draw, TOKENS))
        elif kind == "digits":
            head, digits, tail = re.match(r"(\D*)(\d*)(.*)", parts[i]).groups()
            parts[i] = head + draw(_DIGITS) + tail if digits else parts[i]
        elif kind == "case":
            parts[i] = pick(draw, (parts[i].upper(), parts[i].title(), parts[i].swapcase()))
        elif kind == "token":
            parts[i] = pick(draw, TOKENS)
    text = parts[0] + "".join(draw(_SEPARATOR) + part for part in parts[1:])
    return pick(draw, ("", "", " ", "\t", "\u00a0")) + text + pick(draw, ("", "", " ", "\n"))


mutated_environments = _mutated_environments()


@pytest.mark.slow
@settings(FUZZ, max_examples=1_000)
@given(st.lists(mostly(mutated_environments, st.text(), 3), min_size=10, max_size=10))
# Found by this test: int() of a 4302-digit run in the did-you-mean code raised ValueError (variants.py now gives
# no suggestion for text far longer than a name, and refuses names over MAX_NAME characters).
@example(["torch" + "0" * 4302, "torch00-cu" + "0" * 4302 + "-0-0"])
def test_environment_parser(texts: list[str]):
    RAN.add("test_environment_parser")
    for text in texts:
        check_environment(text)


def check_environment(text: str) -> None:
    """Environment.parse raises only EnvironmentStringError and reads back what it accepts;
    check_variant_name (the lock's variant names) raises only ValueError and accepts only canonical names."""
    COUNTS["environment"] += 1
    try:
        env = Environment.parse(text)
    except KernlockError as err:
        refused(err, EnvironmentStringError)
    else:
        COUNTS["environment accepted"] += 1
        assert str(env) == text.strip()
        assert Environment.parse(str(env)) == env
        assert Environment.parse(str(env)).facts() == env.facts()
    for name in dict.fromkeys((text, text.strip())):
        try:
            variants.check_variant_name(name)
        except ValueError as err:
            assert str(err)
        else:
            COUNTS["variant name accepted"] += 1
            assert variants.parse_variant(name).variant_str == name
            names.check_variant_folder(name)


# -- the budget --------------------------------------------------------------------------------------------------


def test_zz_every_reader_saw_its_budget():
    """Each reader whose tests all ran in this session saw at least MIN_DOCUMENTS documents (printed with -s)."""
    checked = [reader for reader, tests in READER_TESTS.items() if tests <= RAN]
    if not checked:
        pytest.skip("run the whole module to check the per-reader budget")
    print("\nfuzzed documents per reader (accepted):")
    for reader in READER_TESTS:
        print(f"  {reader:12} {COUNTS[reader]:6} ({COUNTS[f'{reader} accepted']})")
    print(f"  lock documents accepted by loose reading (canonical=False): {COUNTS['lock accepted loosely']}")
    print(f"  pyproject edits refused (a layout tomlkit cannot edit safely): {COUNTS['pyproject edits refused']}")
    print(f"  variant names accepted: {COUNTS['variant name accepted']}")
    for reader in checked:
        assert COUNTS[reader] >= MIN_DOCUMENTS, (reader, COUNTS[reader])
