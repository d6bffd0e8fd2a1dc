"""Where the project is: the folder of its pyproject.toml (``--project``, else the nearest one upward).

Light on purpose (no lock model, no TOML): every command finds its project before anything else, and a command
answered from what kernlock remembered (:mod:`kernlock.commands.unchanged`) does little more.
"""

from __future__ import annotations

from pathlib import Path

from kernlock.errors import ProjectError

__all__ = ["PYPROJECT", "find_root", "locate"]

PYPROJECT = "pyproject.toml"
_VCS = (".git", ".hg", ".svn")


def find_root(start: Path | str | None = None) -> Path | None:
    """The nearest folder from ``start`` (default: the current one) upward that holds a pyproject.toml,
    stopping at a version-control root (``.git``, ``.hg``, ``.svn``) or the filesystem root; None if none."""
    folder = Path(start or Path.cwd()).resolve()
    while True:
        if (folder / PYPROJECT).is_file():
            return folder
        if any((folder / vcs).exists() for vcs in _VCS) or folder.parent == folder:
            return None
        folder = folder.parent


def locate(root: Path | str | None) -> Path:
    """``root`` when given (``--project``), else the nearest enclosing project; ProjectError when there is none."""
    if root is not None:
        return Path(root).resolve()
    found = find_root()
    if found is None:
        raise ProjectError(
            f"no pyproject.toml in {Path.cwd()} or any parent folder (up to the repository root)",
            fix="run the command in your project, pass --project DIR, or create one with `kernlock add org/name`",
        )
    return found
