"""Installed library versions, and the transformers/kernels pair that silently turns Hub kernels off."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from kernlock.generations import supported
from kernlock.util import memo

__all__ = [
    "FIRST_KERNEL_REPO_LOADER",
    "INSTALL_KERNELS",
    "INSTALL_PAIR",
    "SUPPORTED",
    "SUPPORTED_KERNELS",
    "SUPPORTED_TRANSFORMERS",
    "TRANSFORMERS_RANGES",
    "Gate",
    "installed",
    "legacy_loader",
    "transformers_gate",
]

#: The kernels range each transformers release line accepts (from each release's metadata and its own
#: KERNELS_MIN/MAX_VERSION); used when the installed transformers does not declare the constants.
TRANSFORMERS_RANGES: tuple[tuple[str, str, str, str], ...] = (
    # transformers from, transformers below, kernels minimum, kernels below
    ("5.13", "5.15", "0.15.2", "0.16.0"),
    ("5.15", "5.20", "0.16.0", "0.17.0"),
    ("5.20", "5.23", "0.17.2", "0.18.0"),
    ("5.23", "5.25", "0.18.2", "0.19.0"),
    ("5.25", "6.0", "0.19.1", "0.20.0"),
)
# What kernlock supports comes from tests/compat/matrix.toml (kernlock.generations.supported, generated).
SUPPORTED_KERNELS = f"kernels {supported.KERNELS}"
INSTALL_KERNELS = f"{supported.INSTALL_PAIR} (the newest pair kernlock was tested with)"
SUPPORTED_TRANSFORMERS = (
    f"transformers {supported.TRANSFORMERS_WITH_HUB_KERNELS} with the kernels they accept; "
    f"{TRANSFORMERS_RANGES[-1][0]}+ with kernels >= {TRANSFORMERS_RANGES[-1][2]}"
)
INSTALL_PAIR = supported.INSTALL_PAIR
SUPPORTED = {
    "kernels": supported.KERNELS,
    "transformers": supported.TRANSFORMERS,
    "huggingface_hub": "1.10 - 2.x (tested: 1.33.0, 2.4.0)",
    "torch": "2.13.0 on the CPU; any torch the kernels loader supports",
}
#: kernels 0.14 moved to `kernel`-type repositories; older loaders read the `model`-type ones the Hub retired.
FIRST_KERNEL_REPO_LOADER = Version("0.14")


def legacy_loader() -> str | None:
    """A message when the installed kernels predates `kernel`-type repositories (None otherwise)."""
    version = installed("kernels")
    if version is None or Version(version) >= FIRST_KERNEL_REPO_LOADER:
        return None
    return (
        f"kernels {version} loads `model`-type kernel repositories, which the Hub no longer serves for kernels: "
        f"kernlock does not support it. Upgrade to kernels >= {supported.KERNELS_MINIMUM} with transformers >= "
        f"{supported.TRANSFORMERS_MINIMUM}, e.g. "
        f"{INSTALL_PAIR}."
    )


def installed(name: str) -> str | None:
    """The installed version of distribution ``name`` (the first on ``sys.path``), or None. Read with
    ``importlib.metadata`` (its imports, email, zipfile and csv, cost ~15 ms) and remembered against the
    ``sys.path`` folders (:mod:`kernlock.util.memo`): an install or uninstall in any of them reads it again."""
    kept = memo.recall("installed", [name])
    if isinstance(kept, dict) and "version" in kept:
        remembered = kept["version"]
        return remembered if isinstance(remembered, str) else None
    folders = memo.identities(memo.installed())
    import importlib.metadata

    try:
        version: str | None = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = None
    memo.remember("installed", [name], folders, {"version": version})
    return version


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    """The kernels version range the installed transformers accepts, and whether kernels is in it."""

    transformers: str
    kernels: str | None
    minimum: str
    maximum: str

    @property
    def ok(self) -> bool:
        return self.kernels is not None and Version(self.minimum) <= Version(self.kernels) < Version(self.maximum)

    def message(self) -> str:
        if self.ok:
            accepts = f">={self.minimum},<{self.maximum}"
            return f"transformers {self.transformers} uses kernels {self.kernels} (accepts {accepts})"
        found = f"kernels {self.kernels}" if self.kernels else "no kernels package"
        return (
            f"transformers {self.transformers} only uses kernels >={self.minimum},<{self.maximum}, but {found} is "
            f"installed: every Hub kernel path in transformers is silently OFF. Install `kernels>={self.minimum},"
            f"<{self.maximum}` if your index has it, or a matching pair, e.g. {INSTALL_PAIR}."
        )


def transformers_gate() -> Gate | None:
    """Read transformers' own KERNELS_MIN/MAX_VERSION without importing transformers (None if absent)."""
    version = installed("transformers")
    spec = importlib.util.find_spec("transformers")
    if version is None or spec is None or not spec.submodule_search_locations:
        return None
    source = Path(next(iter(spec.submodule_search_locations)), "utils", "import_utils.py")
    text = source.read_text() if source.exists() else ""
    low = re.search(r'^KERNELS_MIN_VERSION\s*=\s*"([^"]+)"', text, re.M)
    high = re.search(r'^KERNELS_MAX_VERSION\s*=\s*"([^"]+)"', text, re.M)
    if low and high:
        minimum, maximum = low.group(1), high.group(1)
    else:
        release = Version(version)
        found = [g for g in TRANSFORMERS_RANGES if Version(g[0]) <= release < Version(g[1])]
        if not found:
            return None  # transformers <= 5.12 (model-type kernel repos): see legacy_loader()
        minimum, maximum = found[0][2], found[0][3]
    return Gate(transformers=version, kernels=installed("kernels"), minimum=minimum, maximum=maximum)
