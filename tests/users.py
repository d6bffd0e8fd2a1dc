"""The other users of the machine (tests/system/test_shared_cache.py): a folder given to one, and an interpreter they
can all run."""

from __future__ import annotations

import sys
from os import chown, geteuid
from pathlib import Path

import pytest


def give_away(path: Path) -> None:
    """Make ``path`` another user's (uid 4242); skips the test where only root could do that."""
    if geteuid() != 0:
        pytest.skip("only root can hand a folder to another user")
    chown(path, 4242, -1)


#: What the other users' processes import: kernlock and what it needs, torch (a kernel build imports it) and numpy
#: (torch warns without it).
PORTABLE_ROOTS = ("kernlock", "torch", "numpy")


def reachable_by_others(path: Path) -> bool:
    """Whether every user may enter ``path`` and each folder above it (the search bit for others)."""
    import stat

    return all(folder.stat().st_mode & stat.S_IXOTH for folder in [path, *path.parents])


def portable_python(folder: Path) -> tuple[Path, dict[str, str]]:
    """A copy of this interpreter that every user of the machine can run, wherever this clone (its .venv) and the
    base interpreter lie: a home folder of mode 0700 or 0750 keeps the other users out of both, and a test must
    not open it to them. In ``folder`` (which the caller made reachable by every user): the base interpreter, its
    standard library, its ``libpython`` where it loads one, and the installed distributions that PORTABLE_ROOTS
    need with kernlock from this checkout, each file hard-linked (copied where a link cannot be made: another
    filesystem, a file the others may not read). Returns the interpreter and the variables its environment needs."""
    import importlib.metadata as metadata
    import os
    import shutil
    import stat
    import sysconfig

    from packaging.requirements import Requirement

    import kernlock

    def place(src: Path, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        mode = src.stat().st_mode
        if mode & stat.S_IROTH and (mode & stat.S_IXOTH or not mode & stat.S_IXUSR):
            try:
                os.link(src, dest)  # the same file: the others may read it (and run it) where its owner may
                return
            except OSError:  # another filesystem, or links refused
                pass
        shutil.copyfile(src, dest)
        dest.chmod(0o755 if mode & stat.S_IXUSR else 0o644)

    def place_tree(src: Path, dest: Path, skip: tuple[str, ...] = ()) -> None:
        for path in src.rglob("*"):
            relative = path.relative_to(src)
            if relative.parts[0] not in skip and path.is_file():
                place(path, dest / relative)

    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(os.path.realpath(sys._base_executable))  # type: ignore[attr-defined]
    place(base, folder / "bin" / base.name)
    stdlib = folder / "lib" / version
    place_tree(Path(sysconfig.get_paths()["stdlib"]), stdlib, skip=("site-packages", "test"))
    env = {}
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):  # the interpreter finds libpython by its absolute RUNPATH
        library = Path(sysconfig.get_config_var("LIBDIR")) / sysconfig.get_config_var("INSTSONAME")
        place(library, folder / "lib" / library.name)
        env["LD_LIBRARY_PATH"] = str(folder / "lib")
    site = stdlib / "site-packages"
    todo, seen = list(PORTABLE_ROOTS), set()
    while todo:
        try:
            dist = metadata.distribution(todo.pop())
        except metadata.PackageNotFoundError:
            continue
        name = dist.metadata["Name"]
        if name in seen:
            continue
        seen.add(name)
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
        for file in dist.files or []:
            # not a script outside site-packages, nor the .pth of an editable install (it names this checkout)
            if file.parts[0] != ".." and not (name == "kernlock" and file.suffix == ".pth"):
                place(Path(dist.locate_file(file)), site / file)
    if not (site / "kernlock" / "__init__.py").exists():  # an editable install: the package from this checkout
        package = Path(kernlock.__file__).parent
        for path in package.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                place(path, site / "kernlock" / path.relative_to(package))
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    return folder / "bin" / base.name, env
