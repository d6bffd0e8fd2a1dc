"""Rules the test suite keeps about itself: no wall-clock assertion (speed lives in benchmarks/, measured as
medians; tests assert on what the request log records), and no test helper copied between test files. And rules
the code keeps: no import cycle, no module too big to review, a declared API (``__all__``, ``py.typed`` in the
wheel)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
CLOCKS = re.compile(
    r"\btime\.(monotonic|perf_counter|time|process_time)(_ns)?\(\)|\b(elapsed|duration|seconds_taken)\b"
)


def _test_sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if p.name != Path(__file__).name)


def test_no_assertion_reads_a_clock() -> None:
    offenders = [
        f"{path.relative_to(TESTS)}:{number}: {line.strip()}"
        for path in _test_sources()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line.lstrip().startswith("assert") and CLOCKS.search(line)
    ]
    assert offenders == [], "wall-clock assertions (move the figure to benchmarks/):\n" + "\n".join(offenders)


def test_the_clock_pattern_catches_what_it_must() -> None:
    assert CLOCKS.search("assert time.monotonic() - started < 0.6")
    assert CLOCKS.search("assert elapsed < 15, elapsed")
    assert not CLOCKS.search("assert hub.log.count(contains='/resolve/') == 3")


def test_child_process_helpers_live_in_processes_py() -> None:
    """The snippets every child process runs are defined once, in tests/processes.py."""
    copies = {
        marker: [str(p.relative_to(TESTS)) for p in _test_sources() if marker in p.read_text()]
        for marker in ("class SiluAndMul(nn.Module)", "sys.addaudithook(", "def train_llama(", "class Child:")
    }
    assert all(found == ["processes.py"] for found in copies.values()), copies


# -- the code: an acyclic import graph, no module too big to review, a declared API -----------------------------

PACKAGE = TESTS.parent / "kernlock"
#: Lines past which a module of kernlock/ (kernlock/testing too) is refused: a size no reviewer would accept. The
#: rule itself is the review's (docs/architecture.md, "Module size"): a module is split when it holds two jobs; about
#: 400 lines is a reason to look, not a bound that makes code move.
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def _imported(name: str, path: Path, modules: dict[str, Path], *, lazy: bool, typing_too: bool = False) -> set[str]:
    """The kernlock modules ``name`` imports: at module level (not under ``if TYPE_CHECKING:`` unless
    ``typing_too``), and with ``lazy`` also inside functions. ``from pkg import x`` is an import of ``pkg.x`` when
    that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if _type_checking_only(node) and not typing_too:
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                source = ".".join([*base, *([node.module] if node.module else [])])
                submodules = {f"{source}.{alias.name}" for alias in node.names} & modules.keys()
                found.update(submodules or {source})
                if len(submodules) < len(node.names):
                    found.add(source)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not lazy:
                continue
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    visit([child for child in children if isinstance(child, ast.stmt | ast.excepthandler)])
            if isinstance(node, ast.ExceptHandler | ast.match_case):
                visit(node.body)

    visit(ast.parse(path.read_text()).body)
    found &= modules.keys()
    found.discard(name)
    if lazy:  # a submodule's package is initialised before it: importing it again closes no loop
        found -= {name.rsplit(".", depth)[0] for depth in range(1, name.count(".") + 1)}
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (``a -> b -> ... -> a``), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := walk(target)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := walk(node)):
            return found
    return None


def _import_graph(*, lazy: bool) -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules, lazy=lazy) for name, path in modules.items()}


@pytest.mark.parametrize("lazy", [False, True], ids=["module-level", "with-imports-inside-functions"])
def test_kernlock_has_no_import_cycle(lazy: bool) -> None:
    """No module imports one that imports it back, at module level nor (a hidden cycle, like runtime and its
    hooks had) from inside a function; imports under ``if TYPE_CHECKING:`` do not count."""
    graph = _import_graph(lazy=lazy)
    assert "kernlock.runtime.activation" in graph["kernlock.activate"]  # the graph is read, not empty
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


#: kernlock's rooms from the top floor down (docs/architecture.md): a module may import from its own room and the
#: rooms below it, never from one above. The top-level modules stand where their imports put them.
FLOORS = [
    ["__main__"],
    ["cli"],
    ["api"],
    ["commands"],
    ["activate", "distributed", "ray", "kernlock"],
    ["runtime", "airgap"],
    ["sync", "resolve"],
    ["signing"],
    ["hub"],
    ["project"],
    ["lock"],
    ["environments"],
    ["generations"],
    ["variants"],
    ["util", "errors", "_version"],
]


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "kernlock"


def _floor(module: str) -> int:
    room = _room(module)
    return next(level for level, rooms in enumerate(FLOORS) if room in rooms)


def _every_import() -> dict[str, set[str]]:
    """Every kernlock import of every module: at module level, inside functions and under TYPE_CHECKING."""
    modules = _modules()
    return {name: _imported(name, path, modules, lazy=True, typing_too=True) for name, path in modules.items()}


def test_kernlock_has_no_import_cycle_even_through_type_checking_imports() -> None:
    cycle = _cycle(_every_import())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_module_lives_in_a_room_of_the_plan() -> None:
    rooms = {room for floor in FLOORS for room in floor}
    stray = sorted(name for name in _modules() if _room(name) not in rooms and _room(name) != "testing")
    assert stray == [], f"modules outside the rooms of docs/architecture.md: {stray}"


def test_no_import_runs_up_a_floor() -> None:
    """A room imports only from itself and the rooms below it (FLOORS, docs/architecture.md)."""
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in _every_import().items()
        if _room(name) != "testing"
        for target in targets
        if _room(target) != "testing" and _floor(target) < _floor(name)
    )
    assert upward == [], "imports that run up a floor: " + ", ".join(upward)


def test_the_floor_check_sees_an_upward_import() -> None:
    assert _floor("kernlock.hub.client") > _floor("kernlock.sync.fetch")  # sync may import hub
    assert _floor("kernlock.sync.cache") < _floor("kernlock.hub.client")  # so hub -> sync would be refused


def _over_size() -> list[str]:
    return [
        f"{path.relative_to(PACKAGE.parent)} ({lines} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    ]


def test_no_module_is_over_600_lines() -> None:
    assert _over_size() == [], f"modules over {MAX_LINES} lines (split them by job):\n" + "\n".join(_over_size())


def _dollar_anchored_patterns(source: str) -> list[str]:
    """Patterns given to ``re`` that end in ``$`` without ``re.M``: ``$`` also matches before a final newline, so
    ``re.match("^[0-9a-f]{40}$", sha + "\\n")`` passes; checks must use ``fullmatch`` with no anchors."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            continue
        owner, pattern = node.func.value, node.args[0]
        multiline = any("M" in ast.unparse(arg) for arg in [*node.args[1:], *(k.value for k in node.keywords)])
        if (
            isinstance(owner, ast.Name)
            and owner.id == "re"
            and isinstance(pattern, ast.Constant)
            and isinstance(pattern.value, str)
            and pattern.value.endswith("$")
            and not multiline
        ):
            found.append(pattern.value)
    return found


def test_no_check_pattern_ends_in_a_dollar() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}: {pattern}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for pattern in _dollar_anchored_patterns(path.read_text())
    ]
    assert offenders == [], "use re.fullmatch (or pattern.fullmatch) without ^...$:\n" + "\n".join(offenders)


def test_the_dollar_finder_finds_one() -> None:
    assert _dollar_anchored_patterns('import re\nX = re.compile(r"^[0-9a-f]{40}$")') == ["^[0-9a-f]{40}$"]
    assert _dollar_anchored_patterns('import re\nre.search(r"^A = 1$", text, re.M)') == []
    assert _dollar_anchored_patterns('import re\nX = re.compile(r"[0-9a-f]{40}")') == []


def _declared(path: Path) -> list[str] | None:
    """The module's ``__all__`` (a literal list), or None when it has none."""
    for node in ast.parse(path.read_text()).body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return list(ast.literal_eval(node.value)) if node.value is not None else []
    return None


def _public_modules() -> dict[str, Path]:
    return {name: path for name, path in _modules().items() if not any(p.startswith("_") for p in name.split(".")[1:])}


def _bound(statements: list[ast.stmt]) -> set[str]:
    """The names module-level code binds (definitions, assignments, imports; inside ``if``/``try`` too)."""
    names: set[str] = set()
    for node in statements:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        if isinstance(node, ast.If | ast.Try):
            names |= _bound([*node.body, *node.orelse, *getattr(node, "finalbody", [])])
    return names


def test_every_declared_api_names_what_the_module_defines() -> None:
    """``__all__`` lists names that exist, and every public (not ``_``-prefixed) function and class defined."""
    problems = []
    for name, path in _modules().items():
        declared = _declared(path)
        if declared is None:
            continue
        tree = ast.parse(path.read_text())
        missing = sorted(set(declared) - _bound(tree.body))
        defined = {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
        }
        undeclared = sorted(defined - set(declared))
        if missing or undeclared:
            problems.append(f"{name}: in __all__ but not defined {missing}; public but not in __all__ {undeclared}")
    assert problems == []


def test_every_public_module_declares_its_api() -> None:
    lacking = [name for name, path in _public_modules().items() if _declared(path) is None]
    assert lacking == [], f"modules without __all__: {lacking}"
