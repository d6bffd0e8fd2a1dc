"""What the kernels loader checks after choosing a build, checked at lock time against an environment's facts.

The loader first chooses a variant by name (:mod:`kernlock.variants.grammar`), then validates that one build: its
``metadata.json`` must cover the GPU's compute capability (``backend.archs``; kernels' ``archs.py``) and its
``kernels-minver`` must not exceed the installed loader (kernels' ``MinverValidator``); a ZIP build
(``"build-layout": "zip"``) loads with kernels 0.19+ only. A build without ``metadata.json`` loads on no loader
kernlock knows (kernels 0.15 on read it for every build). It never falls back to another variant, so a build that
fails makes the whole version unusable on that environment. Free-threaded CPython < 3.15 is part of the rule itself
(no arch build is chosen). This module copies those checks so that ``kernlock lock`` refuses at lock time what would
fail at load time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from packaging.version import InvalidVersion, Version

from kernlock.environments.environment import Environment
from kernlock.errors import ResolutionError

__all__ = [
    "NO_BUILD",
    "ZIP_LOADERS",
    "cuda_arch_supports",
    "no_build_reason",
    "no_metadata_reason",
    "refusal",
    "supports_capability",
]


#: The reason of an environment that no build of a commit matches.
NO_BUILD = "no build for it"
#: The first loader that reads the ZIP build layout (``"build-layout": "zip"``: the package as one ``{id}.zip``).
ZIP_LOADERS = (0, 19)
_ARCH = re.compile(r"([0-9]+)\.([0-9]+)([af]?)")


def cuda_arch_supports(arch: str, capability: tuple[int, int]) -> bool | None:
    """Whether one declared CUDA arch (``9.0``, ``9.0a``, ``10.0f``, ``12.0+PTX``) runs on ``capability``; None
    for an arch string in an unknown format (kernels 0.17's ``_cuda_arch_supports``)."""
    ptx = arch.endswith("+PTX")
    match = _ARCH.fullmatch(arch[: -len("+PTX")] if ptx else arch)
    if match is None:
        return None
    arch_major, arch_minor, suffix = int(match.group(1)), int(match.group(2)), match.group(3)
    if suffix == "a":  # architecture-specific: that capability only
        return capability == (arch_major, arch_minor)
    if suffix == "f" or not ptx:  # family-specific and base builds: same major, same or newer minor
        return capability[0] == arch_major and capability[1] >= arch_minor
    return capability >= (arch_major, arch_minor)  # PTX is compiled for any newer device


def supports_capability(archs: list[str], capability: tuple[int, int]) -> bool:
    """Whether a build with these declared archs loads on a GPU of ``capability``; archs in no known format
    cannot be judged and pass, as in the loader."""
    supports = [cuda_arch_supports(arch, capability) for arch in archs]
    return all(s is None for s in supports) or any(supports)


def refusal(env: Environment, name: str, metadata: object, where: str) -> str | None:
    """Why the loader on ``env`` would refuse build ``name`` (its parsed ``metadata.json``), or None.

    ``where`` names the file in errors about malformed metadata.
    """
    if not isinstance(metadata, dict):
        return None
    backend = metadata.get("backend")
    archs = backend.get("archs") if isinstance(backend, dict) else None
    kind = backend.get("type") if isinstance(backend, dict) else None
    if env.extras.cuda_capabilities and kind == "cuda" and isinstance(archs, list) and archs:
        archs = [str(a) for a in archs]
        lacking = [
            text
            for text, pair in zip(env.extras.cuda_capabilities, env.extras.capability_pairs(), strict=True)
            if not supports_capability(archs, pair)
        ]
        if lacking:
            return f"its build {name} lacks CUDA capability {', '.join(lacking)} (built for {', '.join(archs)[:200]})"
    raw = metadata.get("kernels-minver")
    if env.kernels is not None and raw is not None:
        try:
            minver = Version(str(raw)[:32])
        except InvalidVersion:
            raise ResolutionError(
                f"{where}: `kernels-minver` {raw!r:.40} is not a version", fix="report it to the kernel's publisher"
            ) from None
        installed = Version(".".join(map(str, env.kernels.release)))  # the loader drops pre-release parts
        if installed < minver:
            return f"declares kernels {env.kernels}, but its build {name} needs kernels >= {minver}"
    if env.kernels is not None and metadata.get("build-layout") == "zip" and env.kernels.release < ZIP_LOADERS:
        return f"declares kernels {env.kernels}, but its build {name} is a ZIP build, which kernels 0.19+ loads"
    return None


def no_metadata_reason(name: str, paths: Iterable[str]) -> str | None:
    """Why build ``name`` loads nowhere when its files' ``paths`` hold no metadata.json: every kernels release
    kernlock knows (0.15 on) reads it to load a build (older Hub builds have none)."""
    if "metadata.json" in paths:
        return None
    return f"its build {name} has no metadata.json, which every kernels release (0.15 on) reads to load a build"


def no_build_reason(env: Environment) -> str:
    """Why ``env`` got no build at all: the rule's reason, in words."""
    if env.extras.free_threaded:
        return f"free-threaded Python {env.extras.python} loads no arch build (only torch-<backend> noarch builds)"
    return NO_BUILD
