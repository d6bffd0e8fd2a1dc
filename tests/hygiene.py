"""The suite's own home: a test session gives itself, and so every process it starts, a HOME, XDG folders and
caches of its own in a temporary folder, and fails when something was written into the real home all the same.

tests/conftest.py imports this module before anything else (kernlock, huggingface_hub: huggingface_hub reads
``HF_HOME`` once, at its import) and loads it as a plugin (``pytest_plugins``): :func:`redirect` runs at the import,
the check after the session (:func:`pytest_sessionfinish`). Only the session's first process (pytest itself, or the
pytest-xdist controller) makes the home and checks; its workers and the processes the tests start inherit the home
through the environment (:data:`SESSION_HOME`), as does a pytest a test starts.

What the check guards (:func:`snapshot`): every file and folder below :data:`WALKED` (kernlock's cache, the Hub's,
the caches of what kernlock loads through), and the entries right in :data:`LISTED` (a new dotfile, a new cache
folder), of the home that was HOME when the session began (:data:`REAL_HOME`, where the check looks: a test of the
check gives the pytest it starts a scratch HOME). What is new there after the session, changed or gone fails it.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

#: The session's home, set by its first process: its workers and every process a test starts inherit it (a
#: ``PYTEST_`` name: envs.clean_env drops every ``HF_``, ``KERNELS_`` and ``KERNLOCK_`` variable).
SESSION_HOME = "PYTEST_KERNLOCK_HOME"
#: The home the check guards: HOME when the session began.
REAL_HOME = "PYTEST_KERNLOCK_REAL_HOME"

#: The session's HOME; the XDG folders are unset (:data:`XDG`), so every process finds them at their default place
#: below its HOME: the session's, or the one a test gives a process (another Unix user's: the session's home is
#: root's alone).
FOLDERS = {"HOME": ""}
XDG = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")
#: Removed for the session: each would move a cache (kernlock's, huggingface_hub's, kernels', transformers',
#: datasets', torch's, Triton's, matplotlib's) out of the session's home, into a developer's ``HF_HOME=/data/hf``.
MOVERS = (
    *("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ASSETS_CACHE", "HUGGINGFACE_ASSETS_CACHE"),
    *("HF_XET_CACHE", "HF_TOKEN_PATH", "HF_STORED_TOKENS_PATH", "HF_DATASETS_CACHE", "HF_MODULES_CACHE"),
    *("TRANSFORMERS_CACHE", "KERNELS_CACHE", "KERNLOCK_CACHE", "TORCH_HOME", "TRITON_HOME", "TRITON_CACHE_DIR"),
    "MPLCONFIGDIR",
)
#: Kept on the real home's, when nothing else names them and they exist there: the tools the suite runs read them
#: (pyenv's interpreters, for the Pythons of tests/compat; pip's configuration, its index; uv's downloads, which the
#: installs of a few tests reuse). None is below :data:`WALKED`.
KEPT = {
    "PYENV_ROOT": ".pyenv",
    "PIP_CONFIG_FILE": ".config/pip/pip.conf",
    "UV_CACHE_DIR": ".cache/uv",
    "UV_PYTHON_INSTALL_DIR": ".local/share/uv/python",
}

#: Below the real home: folders the check walks whole (kernlock's cache, huggingface_hub's and its legacy token
#: folder, sigstore's trust root, Triton's, torch's and matplotlib's caches).
WALKED = (
    *(".cache/kernlock", ".cache/huggingface", ".huggingface", ".cache/sigstore-python"),
    *(".local/share/sigstore-python", ".triton", ".cache/torch", ".cache/matplotlib", ".config/matplotlib"),
)
#: Below the real home: folders whose own entries the check lists (a new dotfile or cache folder of anything).
LISTED = ("", ".cache", ".config", ".local", ".local/share", ".local/state")

#: A path's state: (kind, size, modification time in ns) for a file; a folder's contents change its time, which the
#: entries below it already say.
State = tuple[str, int, int]


def snapshot(home: Path) -> dict[str, State]:
    """What the check compares: every path below ``home``'s :data:`WALKED` folders and in its :data:`LISTED` ones."""
    found: dict[str, State] = {}

    def note(path: str) -> None:
        try:
            st = os.lstat(path)
        except OSError:
            return
        kind = "folder" if stat.S_ISDIR(st.st_mode) else "file"
        found[path] = (kind, 0, 0) if kind == "folder" else (kind, st.st_size, st.st_mtime_ns)

    for name in LISTED:
        for path in _listing(home / name):
            if not _kept(Path(path).relative_to(home)):
                note(path)
    for name in WALKED:
        top = home / name
        note(str(top))
        for folder, dirs, files in os.walk(top):
            for entry in (*dirs, *files):
                note(os.path.join(folder, entry))
    return found


def _kept(below: Path) -> bool:
    """Whether ``below`` (a path below the home) is a :data:`KEPT` folder or holds one (and is no :data:`LISTED`
    one): it is the tools', shared with the session on purpose, which a program beside it may also write (uv)."""
    return str(below) not in LISTED and any(Path(kept).is_relative_to(below) for kept in KEPT.values())


def _listing(folder: Path) -> list[str]:
    """The paths of ``folder``'s entries; none where it cannot be read."""
    try:
        with os.scandir(folder) as scan:
            return [entry.path for entry in scan]
    except OSError:
        return []


def changes(before: dict[str, State], after: dict[str, State]) -> list[str]:
    """Lines for what ``after`` holds that ``before`` did not, what changed, what is gone; sorted."""
    lines = [f"new: {path}" for path in after.keys() - before.keys()]
    lines += [f"changed: {path}" for path in after.keys() & before.keys() if after[path] != before[path]]
    lines += [f"gone: {path}" for path in before.keys() - after.keys()]
    return sorted(lines, key=lambda line: line.split(": ", 1)[1])


@dataclass
class Session:
    """The home this process made for the session, and the real home as it was."""

    home: Path
    real: Path
    before: dict[str, State]
    found: list[str] | None = None


#: What must not be imported before :func:`redirect`: each may read HOME or a cache variable at its import.
READERS = ("kernlock", "huggingface_hub", "kernels", "torch", "transformers")

#: Set in the session's first process alone (the one that checks).
SESSION: Session | None = None


def redirect() -> None:
    """Give the session a home of its own (in this process's environment, which every process it starts
    inherits), once: a process that already has one (a pytest-xdist worker, a pytest a test started) keeps it."""
    global SESSION
    if os.environ.get(SESSION_HOME):
        return
    early = [name for name in READERS if name in sys.modules]
    if early:
        raise RuntimeError(f"tests/hygiene.py: {early[0]} was imported before the session's home was set")
    real = Path(os.environ.get("HOME") or Path.home())
    home = Path(tempfile.mkdtemp(prefix="kernlock-tests-home-"))
    for name, default in KEPT.items():
        if not os.environ.get(name) and (real / default).exists():
            os.environ[name] = str(real / default)
    for name in (*MOVERS, *XDG):
        os.environ.pop(name, None)
    for name, below in FOLDERS.items():
        (home / below).mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(home / below)
    os.environ[SESSION_HOME] = str(home)
    os.environ[REAL_HOME] = str(real)
    SESSION = Session(home, real, snapshot(real))


redirect()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when it wrote into the real home (once, in the session's first process: every worker is done)."""
    if SESSION is None:
        return
    SESSION.found = changes(SESSION.before, snapshot(SESSION.real))
    if SESSION.found and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SESSION is None or not SESSION.found:
        return
    shown = SESSION.found[:40]
    more = [f"(+{len(SESSION.found) - len(shown)} more)"] if len(SESSION.found) > len(shown) else []
    terminalreporter.write_sep("=", "the suite wrote into the real home", red=True, bold=True)
    terminalreporter.write_line(
        f"Every test process has HOME={SESSION.home} and its caches there (tests/hygiene.py); still, while the "
        f"session ran, these appeared, changed or went in {SESSION.real} (a test gave a process the real home "
        "back, or another program of yours wrote there meanwhile):"
    )
    for line in [*shown, *more]:
        terminalreporter.write_line(f"  {line}")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's home (its first process made it)."""
    if SESSION is not None:
        shutil.rmtree(SESSION.home, ignore_errors=True)
