"""`kernlock environments`: the environment strings kernels have builds for, and what each means.

A machine without torch has no environment of its own, so it cannot learn the string of its cluster's machines
from `kernlock env`. This reads it off the kernels themselves: for each kernel at its revision (the project's
requirements, or the specs given), the build variants of that commit, and for every environment string among them
whether each kernel has a build that environment's loader would choose (an arch build, or a noarch one such as
``torch-universal``). One refs request and one tree per kernel, as `add` makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernlock.environments.environment import Environment
from kernlock.errors import ResolutionError
from kernlock.variants import grammar as variants
from kernlock.variants.types import NoarchVariant

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kernlock.hub.client import Hub

__all__ = ["Available", "Kernel", "available", "meaning"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Kernel:
    """One kernel at one revision: the environment strings it has arch builds for, and its noarch builds."""

    repo: str
    rev: str
    commit: str
    environments: tuple[str, ...]
    noarch: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Available:
    """Every kernel asked about, and per environment string (any kernel's arch build) the kernels that load there."""

    kernels: tuple[Kernel, ...]
    serving: dict[str, tuple[str, ...]]  # environment -> the kernels ("org/name@rev") with a build it would load

    @property
    def everywhere(self) -> list[str]:
        """The environments every kernel has a build for: the ones to declare."""
        return [env for env, repos in self.serving.items() if len(repos) == len(self.kernels)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "kernels": [
                {
                    "repo": k.repo,
                    "rev": k.rev,
                    "commit": k.commit,
                    "environments": list(k.environments),
                    "noarch": list(k.noarch),
                }
                for k in self.kernels
            ],
            "environments": [
                {"name": env, "means": meaning(env), "kernels": list(repos)} for env, repos in self.serving.items()
            ],
        }


def available(hub: Hub, wanted: list[tuple[str, str | None]]) -> Available:
    """The builds of each ``(repo, rev)`` (no rev: its newest version branch) and which environments load them."""
    kernels = [_kernel(hub, repo, rev) for repo, rev in wanted]
    trees = [hub.build_tree(k.repo, k.commit) for k in kernels]  # one repo may come at two revisions (`when` pins)
    names = sorted({env for k in kernels for env in k.environments}, key=_order)
    serving = {
        env: tuple(
            f"{k.repo}@{k.rev}" for k, tree in zip(kernels, trees, strict=True) if _loads(Environment.parse(env), tree)
        )
        for env in names
    }
    return Available(kernels=tuple(kernels), serving=serving)


def _loads(env: Environment, tree: Iterable[str]) -> bool:
    """Whether ``env`` loads one of the builds ``tree`` names (on some Python, where the choice depends on it)."""
    try:
        return env.select_variant(tree) is not None
    except ResolutionError:  # kernels 0.19 builds for a newer Python beside others: it loads one of them
        return True


def _kernel(hub: Hub, repo: str, rev: str | None) -> Kernel:
    refs = hub.refs(repo)
    if rev is None:
        versions = refs.versions()
        if not versions:
            raise ResolutionError(f"{repo} has no version branch", fix=f"name a revision, e.g. `{repo}@main`")
        rev = f"v{max(versions)}"
    commit = refs.branches.get(rev) or refs.tags.get(rev) or (rev if len(rev) == 40 else None)
    if commit is None:
        raise ResolutionError(
            f"{repo} has no branch or tag '{rev}'",
            fix="pick one of its versions, which `kernlock outdated` or the Hub lists",
        )
    environments: set[str] = set()
    noarch: list[str] = []
    for name in hub.build_tree(repo, commit):
        machine = Environment.of_build(name)  # a torch arch build, in either name form
        if machine is not None:
            environments.add(machine.name)
        elif _noarch(name):
            noarch.append(name)  # torch-universal, torch-cuda, mlx-metal, ...
    return Kernel(
        repo=repo,
        rev=rev,
        commit=commit,
        environments=tuple(sorted(environments, key=_order)),
        noarch=tuple(sorted(noarch)),
    )


def _noarch(name: str) -> bool:
    """Whether ``name`` is a noarch build (the grammar's; a name outside it is no build a loader reads)."""
    try:
        return isinstance(variants.parse_variant(name), NoarchVariant)
    except ValueError:
        return False


def meaning(name: str) -> str:
    """An environment string in words: ``torch 2.13, CUDA 12.8, x86_64 Linux``."""
    env = Environment.parse(name)
    facts = env.facts()
    if facts["cuda"] is not None:
        device = f"CUDA {facts['cuda']}"
    elif facts["rocm"] is not None:
        device = f"ROCm {facts['rocm']}"
    elif env.backend.startswith("xpu") and env.backend[3:].isdigit():
        device = f"Intel XPU (oneAPI {env.backend[3:7]}.{env.backend[7:]})"
    else:
        device = _DEVICES.get(env.backend, env.backend)
    system = {"linux": "Linux", "darwin": "macOS", "windows": "Windows"}.get(env.os, env.os)
    abi = " (pre-C++11 ABI)" if "-cxx98-" in name else ""  # torch 2.7 and older built both
    return f"torch {env.torch}{abi}, {device}, {env.cpu} {system}"


#: Backends without a version of their own in these words (an XPU build names its oneAPI release: xpu20252).
_DEVICES = {"cpu": "CPU", "metal": "Apple Metal (MPS)", "neuron": "AWS Neuron", "tpu": "TPU"}


def _order(name: str) -> tuple[Any, ...]:
    """Newest torch first, then the rest of the name."""
    torch = Environment.parse(name).torch
    return (-torch.major, -torch.minor, name)
