"""The Hub kernels the installed transformers loads by itself: its default kernel mapping
(``transformers.integrations.hub_kernels.get_kernel_mapping_transformers()``) as plain values, and which of them an
environment loads (by the device its backend gives transformers, and the GPU capabilities it declares).

transformers 5.25 kernelizes every ``from_pretrained`` with that mapping unless ``USE_HUB_KERNELS`` is false (before,
only with ``use_kernels=True``); it maps cuda, rocm, xpu and mps, so a CPU machine loads none of it. Reading it
imports transformers (and torch): seconds, so it is read in a child process (kernlock's commands import neither) and
remembered while the installed distributions are unchanged (:mod:`kernlock.util.memo`). A process that imported
transformers already (a script calling :func:`kernlock.api.add_implicit`) reads its own mapping, as it is now.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernlock.environments.environment import Environment

__all__ = [
    "DEFAULT_ON",
    "MappedKernel",
    "Mapping",
    "applies",
    "by_default",
    "child_answer",
    "device_of",
    "layer_identity",
    "mapped_kernels",
    "read",
]

#: The first transformers release whose ``from_pretrained`` loads the mapping without ``use_kernels=True``.
DEFAULT_ON = "5.25"
_TRUE = ("true", "1", "y", "yes", "on")  # transformers' is_env_variable_true
_DEVICES = (("cu", "cuda"), ("rocm", "rocm"), ("xpu", "xpu"), ("metal", "mps"), ("cann", "npu"))


@dataclass(frozen=True, slots=True, kw_only=True)
class MappedKernel:
    """One kernel of the mapping: transformers' ``layer`` on ``device`` loads ``kernel_layer`` of ``repo`` at
    ``rev`` (``vN`` for ``version=N``, else the revision: a commit for third-party repos)."""

    layer: str
    device: str
    repo: str
    kernel_layer: str
    rev: str
    #: ``(min, max)`` compute capability as kernels writes it (121 = 12.1); None: every GPU of the device.
    capabilities: tuple[int, int] | None = None
    #: transformers loads it with ``trust_remote_code=True`` (a publisher the Hub may not mark as trusted).
    trust: bool = False

    @property
    def asked(self) -> str:
        """The request as kernlock's run-time errors word it: ``version=2`` or ``revision=<rev>``."""
        version = self.rev[1:] if self.rev[:1] == "v" and self.rev[1:].isdigit() else None
        return f"version={version}" if version is not None else f"revision={self.rev}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Mapping:
    """What the installed transformers loads by itself (``kernels`` empty: nothing, and ``why`` says why)."""

    transformers: str | None
    #: Whether ``from_pretrained`` loads it without being asked (5.25+, unless ``USE_HUB_KERNELS`` is false).
    by_default: bool
    kernels: tuple[MappedKernel, ...] = ()
    why: str | None = None

    def repos(self) -> list[str]:
        return sorted({k.repo for k in self.kernels})


def device_of(env: Environment) -> str:
    """The device type transformers and kernels name ``env``'s backend by (``cu128`` -> ``cuda``, ``metal`` ->
    ``mps``)."""
    backend = env.backend
    return next((device for prefix, device in _DEVICES if backend.startswith(prefix)), backend)


def applies(kernel: MappedKernel, env: Environment) -> bool | None:
    """Whether ``env`` loads ``kernel``: its device, and its declared GPU capabilities for a kernel mapped to some
    only; None when that depends on a capability ``env`` does not declare (``cuda-capabilities``)."""
    if device_of(env) != kernel.device:
        return False
    if kernel.capabilities is None:
        return True
    pairs = env.extras.capability_pairs() if kernel.device == "cuda" else []
    if not pairs:
        return None
    low, high = kernel.capabilities
    return any(low <= major * 10 + minor <= high for major, minor in pairs)


def by_default(version: str | None) -> bool:
    """Whether transformers ``version`` loads its mapping in every ``from_pretrained`` here (``USE_HUB_KERNELS``)."""
    from packaging.version import Version

    enabled = os.environ.get("USE_HUB_KERNELS", "YES").lower() in _TRUE
    return enabled and version is not None and Version(version) >= Version(f"{DEFAULT_ON}.0.dev0")


def read(*, unasked: bool = False) -> Mapping:
    """The installed transformers' default kernel mapping (remembered while the installed distributions are
    unchanged); a Mapping with no kernels, and ``why``, where transformers loads none (``unasked``: none unless it
    loads them without being asked, in which case the mapping is not read)."""
    from kernlock.environments.compat import installed, transformers_gate
    from kernlock.util import memo

    version = installed("transformers")
    if version is None:
        return Mapping(transformers=None, by_default=False, why="transformers is not installed")
    gate = transformers_gate()
    if gate is not None and not gate.ok:
        gated = f"transformers {version} loads no Hub kernel with kernels {gate.kernels} (its version gate)"
        return Mapping(transformers=version, by_default=False, why=gated)
    if unasked and not by_default(version):
        value = os.environ.get("USE_HUB_KERNELS", "YES")
        off = value.lower() not in _TRUE
        unused = (
            f"USE_HUB_KERNELS={value} turns transformers' Hub kernels off"
            if off
            else f"transformers {version} loads its default kernel mapping only with use_kernels=True"
        )
        return Mapping(transformers=version, by_default=False, why=unused)
    live = sys.modules.get("transformers.integrations.hub_kernels")
    if live is not None:
        kernels, why = _from_module(live)
        return Mapping(transformers=version, by_default=by_default(version), kernels=kernels, why=why)
    source = _mapping_source()
    kept = memo.recall("transformers-mapping", [version])
    if isinstance(kept, dict) and isinstance(kept.get("kernels"), list):
        try:
            found = tuple(_kernel(item) for item in kept["kernels"])
            return Mapping(transformers=version, by_default=by_default(version), kernels=found, why=kept.get("why"))
        except (TypeError, KeyError, ValueError):
            pass  # remembered by another kernlock: read again
    files = memo.identities([*memo.installed(), *([str(source)] if source else [])])
    answer = _read_in_child()
    try:
        kernels, why = tuple(_kernel(item) for item in answer["kernels"]), answer.get("why")
    except (TypeError, KeyError, ValueError):
        return Mapping(
            transformers=version, by_default=False, why=f"transformers' kernel mapping could not be read ({answer})"
        )
    if answer.get("remember"):
        memo.remember("transformers-mapping", [version], files, {"kernels": answer["kernels"], "why": why})
    return Mapping(transformers=version, by_default=by_default(version), kernels=kernels, why=why)


_MARK = "KERNLOCK-MAPPING "


def _read_in_child() -> dict[str, Any]:
    """The mapping as :func:`child_answer` prints it, from a fresh interpreter (it imports transformers and torch)."""
    import subprocess

    code = "from kernlock.environments.implicit import child_answer; child_answer()"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as err:
        return {"kernels": [], "why": f"transformers' kernel mapping could not be read ({err})"}
    for line in done.stdout.splitlines():
        if line.startswith(_MARK):
            found: dict[str, Any] = json.loads(line[len(_MARK) :])
            return {**found, "remember": True}
    last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), f"exit {done.returncode}")
    return {"kernels": [], "why": f"transformers' kernel mapping could not be read ({last.strip()})"}


def child_answer() -> None:
    """Print this interpreter's transformers mapping for :func:`_read_in_child` (one line, JSON)."""
    try:
        from transformers.integrations import hub_kernels
    except Exception as err:  # a broken install: say so, it loads nothing then
        kernels: tuple[MappedKernel, ...] = ()
        why: str | None = f"transformers cannot be imported here ({type(err).__name__}: {err})"
    else:
        kernels, why = _from_module(hub_kernels)
    print(_MARK + json.dumps({"kernels": [asdict(k) for k in kernels], "why": why}), flush=True)


def _kernel(item: dict[str, Any]) -> MappedKernel:
    caps = item.get("capabilities")
    return MappedKernel(**{**item, "capabilities": None if caps is None else (int(caps[0]), int(caps[1]))})


def _mapping_source() -> Path | None:
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)), "integrations", "hub_kernels.py")


def _from_module(hub_kernels: Any) -> tuple[tuple[MappedKernel, ...], str | None]:
    """The mapping of an imported ``transformers.integrations.hub_kernels``."""
    build = getattr(hub_kernels, "get_kernel_mapping_transformers", None)
    if build is None:
        return (), "this transformers has no default kernel mapping (get_kernel_mapping_transformers)"
    return mapped_kernels(build()), None


def mapped_kernels(mapping: Any) -> tuple[MappedKernel, ...]:
    """The kernels of a transformers/kernels mapping ``{layer: {device or Device: repo or {Mode: repo}}}``, once
    each (its modes folded together); entries that name no Hub repo (local folders) are left out."""
    found: dict[tuple[Any, ...], MappedKernel] = {}
    for layer, devices in mapping.items():
        for key, value in devices.items():
            device = key if isinstance(key, str) else str(getattr(key, "type", key))
            caps = _capabilities(None if isinstance(key, str) else getattr(key, "properties", None))
            for repo in value.values() if isinstance(value, dict) else (value,):
                kernel = _mapped(str(layer), device, caps, repo)
                if kernel is not None:
                    found.setdefault((kernel.layer, kernel.device, kernel.repo, kernel.rev, caps), kernel)
    return tuple(sorted(found.values(), key=lambda k: (k.repo, k.layer, k.device, k.capabilities or (0, 0))))


def _capabilities(properties: Any) -> tuple[int, int] | None:
    low, high = getattr(properties, "min_capability", None), getattr(properties, "max_capability", None)
    return (int(low), int(high)) if isinstance(low, int) and isinstance(high, int) else None


def _mapped(layer: str, device: str, caps: tuple[int, int] | None, repo: Any) -> MappedKernel | None:
    """One LayerRepository as a MappedKernel (kernels keeps its fields private: ``_repo_id``, ``_version``...)."""
    identity = layer_identity(repo)
    if identity is None:
        return None
    repo_id, kernel_layer, rev = identity
    trust = getattr(repo, "_trust_remote_code", False) is True
    return MappedKernel(
        layer=layer, device=device, repo=repo_id, kernel_layer=kernel_layer, rev=rev, capabilities=caps, trust=trust
    )


def layer_identity(repo: Any) -> tuple[str, str, str] | None:
    """``(repo id, layer name, rev)`` of a kernels ``LayerRepository`` (``rev``: ``vN`` or the revision); None for
    anything else."""
    repo_id = getattr(repo, "_repo_id", None)
    layer = getattr(repo, "layer_name", None)
    version, revision = getattr(repo, "_version", None), getattr(repo, "_revision", None)
    if not isinstance(repo_id, str) or not isinstance(layer, str):
        return None
    if isinstance(version, int) and not isinstance(version, bool):
        return repo_id, layer, f"v{version}"
    return (repo_id, layer, revision) if isinstance(revision, str) else None
