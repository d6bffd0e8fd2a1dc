"""kernlock as a user installs it: the wheel, in a fresh environment of each Python; and a virtual environment
over this one's packages that a test may change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _uv() -> str:
    """The uv of this environment (the [test] extra installs it), else the one on PATH."""
    uv = Path(sys.executable).with_name("uv")
    return str(uv) if uv.exists() else "uv"


def build_wheel(out: Path) -> Path:
    """The kernlock wheel of this checkout, built with `uv build` as the README says; returns its path."""
    done = subprocess.run(
        [_uv(), "build", "--wheel", "-q", "-o", str(out), str(ROOT)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, "uv build failed:\n" + done.stderr[-3000:]
    [wheel] = out.glob("kernlock-*.whl")
    return wheel


def wheel_venv(folder: Path, python: str, wheel: Path) -> Path:
    """A fresh environment of ``python`` (a path, or a version for uv to find) at ``folder`` with ``wheel`` installed
    as a user installs it (`uv pip install`, dependencies from the index), and no torch: a constraint no torch
    version meets makes a dependency that wanted torch fail here rather than pull a multi-GB build. Returns its bin
    folder (kernlock and python)."""
    uv = _uv()
    subprocess.run([uv, "venv", "-q", "-p", python, str(folder)], check=True, capture_output=True, timeout=120)
    never = folder.parent / f"{folder.name}-no-torch.txt"
    never.write_text("torch<0\n")
    done = subprocess.run(
        [uv, "pip", "install", "-q", "-p", str(folder / "bin" / "python"), "-c", str(never), str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"installing {wheel.name} for Python {python} failed:\n{done.stderr[-3000:]}"
    return folder / "bin"


def venv_env(bin_folder: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``bin_folder`` first on PATH (its `kernlock` and `python` are the ones a shell finds), as an
    activated environment or a tool install puts them."""
    rest = [p for p in env.get("PATH", "").split(":") if p and p != str(Path(sys.executable).parent)]
    clean = {k: v for k, v in env.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
    return {**clean, "PATH": ":".join([str(bin_folder), *rest])}


def overlay_venv(folder: Path) -> Path:
    """A new virtual environment at ``folder`` that sees this one's packages (kernlock, kernels, torch...) through
    a ``.pth`` line, so a test can change its site-packages (``kernlock hook install``) without touching this one.
    Returns its interpreter."""
    import site
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    assert ours in site.getsitepackages() or ours in sys.path, ours
    (Path(purelib) / "_overlay.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return python
