"""Tests that span the matrix sets (tests/compat/matrix.toml); run by scripts/matrix.sh once every set is built.

- `kernlock lock` writes the same bytes from every set: kernels 0.15.2, 0.16.2, 0.17.2 and no kernels at all
  (set "none"), on Python 3.10, 3.11, 3.12 and 3.13, given the same pyproject and the same Hub. The environments
  are declared, as a machine without torch cannot detect itself.
- `pip install kernlock` resolves beside every set of this Python that installs torch: pip's own resolver (with
  this machine's pip configuration), and the set's pins come out as they went in.

They skip unless ``KERNLOCK_MATRIX_ROOT`` names the folder of the built sets (.matrix/); the main venv is .venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from compat_matrix import ROOT, ROOT_VARIABLE, MatrixSet, load
from packaging.utils import canonicalize_name

from kernlock.testing import HubServer

MATRIX = load()
BUILT = os.environ.get(ROOT_VARIABLE)
pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(not BUILT, reason=f"needs the matrix venvs: run scripts/matrix.sh ({ROOT_VARIABLE})"),
]

PYPROJECT = """\
[project]
name = "cross"
version = "0.1.0"

[tool.kernlock]
environments = [
  "torch213-cxx11-cpu-x86_64-linux",
  "torch213-cxx11-cu130-x86_64-linux",
  { name = "torch212-cxx11-cu128-x86_64-linux", kernels = "0.16.2" },
  "torch212-cxx11-rocm71-x86_64-linux",
  "torch213-cxx11-cpu-aarch64-linux",
]

[tool.kernlock.kernels]
"kernels-community/flash-attn2" = [{ rev = "v5", when = "cuda >= 13.0" }, { rev = "v4" }]
"kernels-community/activation" = "v2.0.0"
"kernels-community/paged-attention" = "v2"
"kernels-community/triton-layer-norm" = "v1"
"kernels-community/rotary" = "v1"
"someone/fast-gelu" = { rev = "v1", trust = true }
"""


def python_of(s: MatrixSet) -> Path:
    if s.name == MATRIX.main:
        return ROOT / ".venv" / "bin" / "python"
    return Path(BUILT or "") / s.name / "bin" / "python"


def installed_kernels(python: Path) -> str:
    code = "import importlib.util as u, importlib.metadata as m\n"
    code += "print(m.version('kernels') if u.find_spec('kernels') else '-')"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_lock_bytes_are_the_same_from_every_set(hub: HubServer, tmp_path: Path, user_env: dict[str, str]) -> None:
    locks: dict[str, bytes] = {}
    loaders: dict[str, str] = {}
    for s in MATRIX.sets:
        python = python_of(s)
        assert python.exists(), f"set {s.name} is not built: {python}"
        project = tmp_path / s.name
        project.mkdir()
        (project / "pyproject.toml").write_text(PYPROJECT)
        env = {**user_env, "KERNLOCK_CACHE": str(tmp_path / f"cache-{s.name}"), "HF_HOME": str(tmp_path / s.name)}
        result = subprocess.run(
            [str(python), "-m", "kernlock", "lock", "--project", str(project)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, (s.name, result.stdout + result.stderr)
        locks[s.name] = (project / "kernels.lock").read_bytes()
        loaders[s.name] = installed_kernels(python)
    # the loader generations this test must cover
    assert {"0.15.2", "0.16.2", "0.17.2", "0.18.3", "0.19.1", "-"} <= set(loaders.values()), loaders
    reference = locks[MATRIX.main]
    assert b"kernels-community/paged-attention" in reference and b"someone/fast-gelu" in reference
    differ = [f"{name} (kernels {loaders[name]})" for name, data in locks.items() if data != reference]
    assert not differ, f"kernels.lock differs from set {MATRIX.main}'s in: {', '.join(differ)}"


@pytest.mark.parametrize("s", [s for s in MATRIX.sets if s.kind == "full"], ids=lambda s: s.name)
def test_pip_resolves_kernlock_beside_the_set(s: MatrixSet, tmp_path: Path) -> None:
    """pip's resolver (this machine's pip configuration), as a user would ask it; nothing is installed."""
    argv = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--disable-pip-version-check",
        "--report",
        str(tmp_path / "report.json"),
        MATRIX.torch,
        *s.requirements,
        str(ROOT),
    ]
    env = {**os.environ, "PIP_NO_INPUT": "1"}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
    assert resolved.get("kernlock") is not None, sorted(resolved)
    for name, req in {canonicalize_name("torch"): None, **s.pins()}.items():
        assert name in resolved, (name, sorted(resolved))
        if req is not None:
            assert req.specifier.contains(resolved[name], prereleases=True), (str(req), resolved[name])
    assert resolved["torch"].startswith("2.13.0")
