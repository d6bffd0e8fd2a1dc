"""The compatibility matrix (matrix.toml beside this file): its sets, which one is installed here, install arguments.

Used by tests/compat/ (what the installed set must show), scripts/matrix.sh (what to install in .matrix/<name> and
what to run there: ``python tests/compat/compat_matrix.py plan``, ``... args NAME``, ``... tests NAME``) and
scripts/supported_versions.py. Only the standard library and ``packaging`` (a kernlock dependency), so every matrix
venv can import it.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MATRIX = Path(__file__).resolve().with_name("matrix.toml")
ROOT = MATRIX.parent.parent.parent
#: Names the selected set by name (scripts/matrix.sh sets it); otherwise the set is found from installed versions.
SET_VARIABLE = "KERNLOCK_MATRIX_SET"
#: The folder of the matrix venvs (.matrix/); set by scripts/matrix.sh for the tests that span several sets.
ROOT_VARIABLE = "KERNLOCK_MATRIX_ROOT"


@dataclass(frozen=True)
class MatrixSet:
    name: str
    requirements: tuple[str, ...]
    transformers_gate: bool | None
    loader: str | None
    kernel_dependencies: bool | None
    flash_attn2_version: int | None
    note: str
    without: tuple[str, ...]
    lock_only: bool
    #: Another Python than the matrix's (``"3.10"``): a set without torch that runs tests/compat/test_pythons.py.
    python: str | None = None
    #: Test files a full set runs beside tests/compat and test_loaders.py (``extra-tests``).
    extra_tests: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """How scripts/matrix.sh builds and tests it: ``full``, ``lock-only`` or ``python``."""
        return "lock-only" if self.lock_only else "python" if self.python else "full"

    @property
    def tests(self) -> list[str]:
        """The pytest arguments scripts/matrix.sh runs in this set (none for a lock-only set)."""
        if self.lock_only:
            return []
        if self.python is not None:
            return ["tests/compat/test_pythons.py"]
        cross = "--ignore=tests/compat/test_matrix_cross.py"
        return ["tests/compat", cross, "tests/functional/test_loaders.py", *self.extra_tests]

    def pins(self) -> dict[str, Requirement]:
        """Each requirement by its canonical distribution name."""
        return {canonicalize_name(r.name): r for r in map(Requirement, self.requirements)}

    def satisfied_here(self) -> bool:
        """Whether every requirement of the set is satisfied by what is installed in this interpreter (and it is
        the set's Python, where the set names one)."""
        if self.python is not None and f"{sys.version_info.major}.{sys.version_info.minor}" != self.python:
            return False
        for name, req in self.pins().items():
            try:
                version = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                return False
            if not req.specifier.contains(version, prereleases=True):
                return False
        return all(_installed(name) is None for name in self.without)

    def requirement(self, name: str) -> str:
        """The specifier the set puts on distribution ``name`` ('' when it names none)."""
        req = self.pins().get(canonicalize_name(name))
        return _spec(req) if req is not None else ""


@dataclass(frozen=True)
class Matrix:
    python: str
    torch: str
    main: str
    sets: tuple[MatrixSet, ...]

    def get(self, name: str) -> MatrixSet:
        for s in self.sets:
            if s.name == name:
                return s
        raise KeyError(f"no set {name!r} in {MATRIX}")

    @property
    def others(self) -> list[MatrixSet]:
        """The sets that live in .matrix/<name> (all but the main one)."""
        return [s for s in self.sets if s.name != self.main]

    def install_args(self, name: str) -> list[str]:
        """What ``uv pip install`` gets for set ``name`` (kernlock itself is added by the caller)."""
        chosen = self.get(name)
        if chosen.lock_only:
            return [*kernlock_dependencies(without=chosen.without), *chosen.requirements]
        if chosen.python is not None:  # no torch: kernlock's own dependencies come with `-e .`
            return [*chosen.requirements, *runner_requirements()]
        return [self.torch, *chosen.requirements, *runner_requirements()]


def _spec(req: Requirement) -> str:
    """The specifier of ``req``, lower bounds first (``>=1.10,<2``)."""
    return ",".join(sorted(map(str, req.specifier), key=lambda spec: (not spec.startswith((">", "=", "~")), spec)))


def kernlock_requirement(name: str) -> str:
    """The specifier kernlock itself (pyproject.toml) puts on distribution ``name``."""
    for spec in _pyproject()["project"]["dependencies"]:
        req = Requirement(spec)
        if canonicalize_name(req.name) == canonicalize_name(name):
            return _spec(req)
    return ""


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def kernlock_dependencies(without: tuple[str, ...] = ()) -> list[str]:
    """kernlock's own dependencies (pyproject.toml) less the named ones, for this Python."""
    skip = {canonicalize_name(n) for n in without}
    found = []
    for spec in _pyproject()["project"]["dependencies"]:
        req = Requirement(spec)
        if canonicalize_name(req.name) in skip or (req.marker is not None and not req.marker.evaluate()):
            continue
        found.append(str(req))
    return found


def runner_requirements() -> list[str]:
    """pytest as the [test] extra pins it (the compat subset needs nothing else to run)."""
    return [s for s in _pyproject()["project"]["optional-dependencies"]["test"] if Requirement(s).name == "pytest"]


def load(path: Path = MATRIX) -> Matrix:
    data = tomllib.loads(path.read_text())
    sets = tuple(
        MatrixSet(
            name=s["name"],
            requirements=tuple(s.get("requirements", ())),
            transformers_gate=s.get("transformers-gate"),
            loader=s.get("loader"),
            kernel_dependencies=s.get("kernel-dependencies"),
            flash_attn2_version=s.get("flash-attn2-version"),
            note=s.get("note", ""),
            without=tuple(s.get("without", ())),
            lock_only=bool(s.get("lock-only", False)),
            python=s.get("python"),
            extra_tests=tuple(s.get("extra-tests", ())),
        )
        for s in data["set"]
    )
    names = [s.name for s in sets]
    if len(set(names)) != len(names) or data["main"] not in names:
        raise ValueError(f"{path}: set names must be unique and include main = {data['main']!r}")
    return Matrix(python=data["python"], torch=data["torch"], main=data["main"], sets=sets)


def interpreter(version: str) -> str:
    """The Python ``version`` (``"3.10"``) to build a venv with: the newest ``$PYENV_ROOT/versions/<version>.*``
    interpreter when there is one (uv does not look there), else ``version`` itself for uv to find."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = [
        p for p in glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python")) if os.access(p, os.X_OK)
    ]
    found.sort(key=lambda p: [int(x) if x.isdigit() else -1 for x in p.split(os.sep)[-3].split(".")])
    return found[-1] if found else version


def current(matrix: Matrix | None = None) -> MatrixSet | None:
    """The set installed in this interpreter: ``$KERNLOCK_MATRIX_SET``, else the one whose pins all hold here."""
    matrix = matrix or load()
    name = os.environ.get(SET_VARIABLE)
    if name:
        chosen = matrix.get(name)
        if not chosen.satisfied_here():
            raise RuntimeError(f"{SET_VARIABLE}={name} but this interpreter ({sys.executable}) does not hold it")
        return chosen
    found = [s for s in matrix.sets if not s.lock_only and s.satisfied_here()]
    return found[0] if len(found) == 1 else None


def _main(argv: list[str]) -> int:
    matrix = load()
    if argv == ["plan"]:  # one line per set outside .venv: NAME full|lock-only|python PYTHON (a version or a path)
        for s in matrix.others:
            print(s.name, s.kind, matrix.python if s.python is None else interpreter(s.python))
        return 0
    if len(argv) == 2 and argv[0] == "args":  # one install argument per line
        print("\n".join(matrix.install_args(argv[1])))
        return 0
    if len(argv) == 2 and argv[0] == "tests":  # one pytest argument per line
        for argument in matrix.get(argv[1]).tests:
            print(argument)
        return 0
    if argv == ["python"]:
        print(matrix.python)
        return 0
    print("usage: compat_matrix.py plan | args NAME | tests NAME | python", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
