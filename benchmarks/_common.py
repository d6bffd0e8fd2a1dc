"""What the benchmark scripts share: a scratch folder and a free port chosen before huggingface_hub is imported."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (HF_ENDPOINT must be known before huggingface_hub is imported)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def in_scratch_folder(prefix: str, run: Callable[[Path], int]) -> int:
    """Call ``run(folder)`` with a fresh temporary folder, removed afterwards; returns its exit status."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        return run(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: Variables that would change what huggingface_hub, kernels or kernlock do in a benchmark's processes.
SCRUBBED = (
    *("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "DO_NOT_TRACK", "DISABLE_TELEMETRY", "LOCAL_KERNELS"),
    *("KERNELS_CACHE", "KERNLOCK_LOCKFILE", "KERNLOCK_MODE", "KERNLOCK_VERIFY"),
)


def use_local_hub(work: Path, port: int, **extra: str) -> None:
    """Point this process (and its children) at a local Hub on ``port`` with caches under ``work``; call it before
    anything imports huggingface_hub or kernels (they read these at import). ``extra``: more variables. The Hub's
    folder is ``work / "hub"``, whose builds the test sigstore instance signs where it can (its trusted root is named
    too); without sigstore's libraries the builds are unsigned."""
    os.environ.update(
        {
            "HF_ENDPOINT": f"http://127.0.0.1:{port}",
            "HF_HUB_DISABLE_XET": "1",
            "HF_HOME": str(work / "hf-home"),
            "HF_HUB_CACHE": str(work / "hf-cache"),
            "KERNLOCK_CACHE": str(work / "kernlock-own"),
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
    )
    from kernlock.testing.fixtures import can_sign

    if can_sign():  # else the fixtures are built unsigned (a GPU image without sigstore): no root to name
        os.environ["KERNLOCK_SIGSTORE_TRUSTED_ROOT"] = str(work / "hub" / "sigstore" / "trusted_root.json")
    for key in SCRUBBED:
        os.environ.pop(key, None)
    os.environ.update(extra)


def write_project(project: Path, repos: list[str], environments: list[str], rev: str = "v1") -> None:
    """A project folder whose pyproject.toml locks ``repos`` at ``rev`` for ``environments``."""
    project.mkdir(parents=True, exist_ok=True)
    table = "".join(f'"{repo}" = "{rev}"\n' for repo in repos)
    envs = ", ".join(f'"{env}"' for env in environments)
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "bench"\nversion = "0"\n\n[tool.kernlock]\nenvironments = [{envs}]\n\n'
        f"[tool.kernlock.kernels]\n{table}"
    )


#: The libraries kernlock's commands import, compiled with it (an installer compiles them; uv does not by default).
LIBRARIES = ("click", "packaging", "huggingface_hub", "kernels", "tomlkit", "filelock")


def compile_bytecode() -> None:
    """Compile the bytecode of kernlock and the libraries its commands import (PYTHONDONTWRITEBYTECODE may be set,
    and uv installs without bytecode): processes start as installed ones do, whichever venv runs them."""
    import compileall
    import importlib.util

    import kernlock

    compileall.compile_dir(str(Path(kernlock.__file__).parent), quiet=1)
    for name in LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            for folder in spec.submodule_search_locations:
                compileall.compile_dir(folder, quiet=1)


def machine_catalog(root: Path, kernels: int, env: str, versions: int = 2) -> tuple[list[str], list[str]]:
    """``kernels`` repos ``kernels-bench/kernel-NN`` (trusted org, ``versions`` branches) of 26 builds each, one of
    them this machine's environment ``env`` as a pure-Python build (it imports on a GPU machine too). Returns the
    repo ids and the environments that load one of the builds (``env`` first)."""
    from kernlock.environments.environment import Environment
    from kernlock.errors import KernlockError
    from kernlock.testing import create_kernel_repo, set_org_trust, standard_variants
    from kernlock.testing.fixtures import KINDS

    builds = [env, *(v for v in standard_variants(("2.11", "2.12", "2.13")) if v != env)][:26]
    set_org_trust(root, "kernels-bench", True)
    repos = [f"kernels-bench/kernel-{i:02d}" for i in range(kernels)]
    branches = {f"v{n}": builds for n in range(1, versions + 1)}
    for i, repo in enumerate(repos):
        create_kernel_repo(root, repo, branches, kind=KINDS[i % len(KINDS)], python_builds=[env])
    environments = [env]
    for name in builds[1:]:
        try:
            if Environment.parse(name).name == name:
                environments.append(name)
        except KernlockError:
            continue  # a noarch or stable-ABI build: not a machine
    return repos, environments
