"""Installed library versions, and the transformers/kernels pair that silently turns Hub kernels off."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

SUPPORTED_KERNELS = "kernels 0.17.2 (>=0.17.2,<0.18)"
INSTALL_KERNELS = "`pip install 'kernels==0.17.2'`"
SUPPORTED_TRANSFORMERS = "transformers 5.20 - 5.22 (tested: 5.22.2)"
INSTALL_PAIR = "`pip install 'transformers==5.22.2' 'kernels==0.17.2'`"
SUPPORTED = {
    "kernels": "0.17.2",
    "transformers": "5.20 - 5.22 (tested: 5.22.2)",
    "huggingface_hub": "2.4 (tested: 2.4.0)",
    "torch": "2.13.0 on the CPU; any torch the kernels loader supports",
}


def installed(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
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
            "installed: every Hub kernel path in transformers is silently OFF. Install a matching pair, e.g. "
            f"{INSTALL_PAIR}."
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
    elif Version(version) >= Version("5.23"):
        minimum, maximum = "0.18.2", "0.19.0"
    else:
        minimum, maximum = "0.17.2", "0.18.0"
    return Gate(version, installed("kernels"), minimum, maximum)
