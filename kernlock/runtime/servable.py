"""Whether the installed kernels loader can load a locked build at all (docs/troubleshooting.md).

kernels 0.19 brought two things older loaders cannot read: build names in its new form
(``torch-2.13-cpu-cpython-3.10-abi3-x86_64-linux``, SDK and MLX builds; their ``parse_variant`` misreads or rejects
them) and the ZIP build layout (``"build-layout": "zip"`` in metadata.json: the package is one ``{id}.zip``, and an
older loader finds no ``__init__.py``). A lock made by kernels 0.19's rule may hold either; under kernels < 0.19
:func:`check` refuses such a build with the one line that names the fix, before the loader fails on it. A build
without metadata.json (older Hub builds; a lock made before kernlock refused them) loads on no kernels release
0.15 on: refused the same way, whatever kernels is installed.

Cheap, for a locked load imports it: names are told apart by their words, not by the variant grammar (the tests
hold :func:`new_name` to :func:`kernlock.variants.grammar.legacy`), and metadata.json is read only under an older
loader, for a build that locks a ``.zip``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from kernlock.errors import ActivationError
from kernlock.lock.model import LockedKernel, LockedVariant

__all__ = ["SINCE", "check", "loader_version", "new_name", "reads_0_19_builds", "zip_build"]

#: The first kernels release that reads both.
SINCE = (0, 19)
_RELEASE = re.compile(r"(\d+)\.(\d+)")


def loader_version() -> str | None:
    """The installed kernels release (``0.17.2``): the imported module's, else its metadata's; None without one."""
    found = getattr(sys.modules.get("kernels"), "__version__", None)
    if isinstance(found, str) and found:
        return found
    from kernlock.environments.compat import installed

    return installed("kernels") or None


def reads_0_19_builds(version: str | None) -> bool:
    """Whether kernels release ``version`` reads ZIP builds and 0.19's names: :data:`SINCE` on, or a version it
    cannot tell (that loader's own errors then speak)."""
    match = _RELEASE.match(version or "")
    return match is None or (int(match.group(1)), int(match.group(2))) >= SINCE


def new_name(name: str) -> bool:
    """Whether build ``name`` is in a form only kernels 0.19+ reads: a Python ABI (``cpython-3.10-abi3``: every
    new-form arch build carries one), an SDK build or an MLX build."""
    parts = name.split("-")
    return parts[0] in ("sdk", "mlx") or "cpython" in parts


def zip_build(variant: LockedVariant, path: Path) -> bool:
    """Whether the verified build at ``path`` is in the ZIP layout (a top-level ``.zip`` it locks, and its
    metadata.json says ``"build-layout": "zip"``)."""
    if not any(f.path.endswith(".zip") and "/" not in f.path for f in variant.files):
        return False
    try:
        metadata = json.loads((path / "metadata.json").read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(metadata, dict) and metadata.get("build-layout") == "zip"


def check(entry: LockedKernel, variant: LockedVariant, path: Path, environment: str) -> None:
    """ActivationError when no kernels can load the locked build (verified at ``path``: it has no metadata.json),
    or when the installed kernels is older than 0.19 and the build is one only 0.19+ loads; nothing otherwise."""
    build = f"{entry.repo} {variant.name} (commit {entry.commit[:12]})"
    if not any(f.path == "metadata.json" for f in variant.files):
        raise ActivationError(
            f"{build} has no metadata.json, which kernels reads to load any build (every release since 0.15)",
            fix=f"Lock a revision whose builds have one: `kernlock add {entry.repo}@<rev>` (`kernlock outdated` lists "
            "the newer ones); `kernlock lock` now refuses such builds",
        )
    version = loader_version()
    if reads_0_19_builds(version):
        return
    from kernlock.generations.supported import INSTALL_PAIR

    declare = f'{{ name = "{environment}", kernels = "{version}" }}'
    if new_name(variant.name):
        raise ActivationError(
            f"{build}: kernels.lock locks a build whose name is in kernels 0.19's form, which kernels {version} "
            "cannot read",
            fix=f"Upgrade kernels to 0.19+ ({INSTALL_PAIR}), or declare this environment's loader, {declare} in "
            "`environments` of [tool.kernlock], and run `kernlock lock` to lock a build it reads",
        )
    if zip_build(variant, path):
        raise ActivationError(
            f'{build} is a ZIP build (build-layout "zip"), which only kernels 0.19+ loads, not kernels {version}',
            fix=f"Upgrade kernels to 0.19+ ({INSTALL_PAIR}), or lock a release with a files-layout build: declare "
            f"{declare} in `environments` of [tool.kernlock] and run `kernlock lock`",
        )
