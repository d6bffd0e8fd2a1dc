"""The fallback for a kernels loader whose seams kernlock does not recognise: the official ``LOCAL_KERNELS`` switch.

``LOCAL_KERNELS="org/a=/path:org/b=/path"`` is read by kernels on every ``get_kernel`` call (0.15 - 0.17; 0.17
also for ``has_kernel`` and kernel dependencies), and a path may name a variant folder directly in every
generation. So every repo locked for this environment is verified once (fetched when not synced, as a hooked
load would) and pointed at its verified variant folder. Entries the user set keep winning (a developer override,
warned about as usual). What the switch cannot do is said once, in one line (:data:`NOT_COVERED`).

A locked repo whose build cannot be served (not synced offline, failing verification, this environment not in
the lock) is pointed, in strict mode, at a folder that does not exist, so that its loads fail instead of loading
unverified code; in warn mode it is left to kernels. Either way a warning names the problem.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

__all__ = ["COVERAGE", "NOT_COVERED", "REFUSED", "install"]

logger = logging.getLogger("kernlock")

NOT_COVERED = (
    "load_kernel, get_locked_kernel, LockedLayerRepository and install_kernel ignore LOCAL_KERNELS; explicit "
    "revisions are not checked against the lock and unlocked repos are not refused"
)
_SWITCH = "LOCAL_KERNELS"
#: Each load path (:data:`kernlock.runtime.loaders.PATHS`) -> (pinned by kernlock, how) with an ``unknown`` loader.
COVERAGE: dict[str, tuple[bool, str]] = {
    "get_kernel(version=N)": (True, _SWITCH),
    "get_kernel(revision=R)": (True, f"{_SWITCH}; the revision is NOT checked against the lock"),
    'transformers attn_implementation="org/repo"': (True, _SWITCH),
    'transformers attn_implementation="flash_attention_2" fallback': (True, _SWITCH),
    "LayerRepository / kernelize": (True, f"{_SWITCH}; version=N still asks the Hub for the branch"),
    "FuncRepository": (True, f"{_SWITCH}; version=N still asks the Hub for the branch"),
    "get_locked_kernel / load_kernel": (False, "ignore LOCAL_KERNELS"),
    "LockedLayerRepository": (False, "ignores LOCAL_KERNELS"),
    "has_kernel": (True, f"{_SWITCH}, where the loader reads it there (kernels 0.17 does)"),
    "install_kernel": (False, "ignores LOCAL_KERNELS"),
    "kernel dependencies (kernel-depends)": (True, f"{_SWITCH}, where the loader reads it there (0.17 does)"),
}
_told = False
_user_value: str | None = None  # LOCAL_KERNELS as the user set it, before kernlock added its entries
#: The folder (that does not exist) each refused repo is pinned to in strict mode -> the one line that says why:
#: kernels' own error names the folder (kernlock.runtime.excepthook prints this line instead).
REFUSED: dict[str, str] = {}


def _parse(value: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in value.split(":") if "=" in item)


def install(version: str, reason: str) -> None:
    """Pin every locked build of this environment through ``LOCAL_KERNELS``; say once what is not covered."""
    global _told, _user_value
    from kernlock.environments.compat import INSTALL_KERNELS
    from kernlock.runtime import policy
    from kernlock.util.hfenv import cache_root

    current = os.environ.get("LOCAL_KERNELS")
    if _user_value is None or current != _joined(_user_value, policy.pinned_by_kernlock):
        _user_value = current or ""
    user = _parse(_user_value)
    builds, problems = policy.locked_builds()
    ours: dict[str, str] = {}
    for repo, path in builds.items():
        if ":" in str(path) or "=" in repo:  # the switch cannot carry this path
            problems[repo] = f"its verified folder {path} cannot be named in LOCAL_KERNELS (it contains ':')."
        else:
            ours[repo] = str(path)
    for repo, problem in problems.items():
        ours.pop(repo, None)
        if policy.strict():
            ours[repo] = str(Path(cache_root(), "not-verified", repo.replace("/", "--")))  # loads of it fail
            REFUSED[ours[repo]] = (
                f"{repo} is locked, but its build here could not be pinned under kernels {version}, so it is not "
                f"loaded: {problem.rstrip('.')}. (With a tested pair installed, every load path is pinned: "
                f"{INSTALL_KERNELS}.)"
            )
        consequence = "its loads fail" if policy.strict() else "it loads unpinned, as kernels would"
        policy.warn_once(
            f"fallback:{repo}", f"{repo} cannot be pinned through LOCAL_KERNELS ({consequence}): {problem}"
        )
    ours = {repo: path for repo, path in ours.items() if repo not in user}
    policy.pinned_by_kernlock.clear()
    policy.pinned_by_kernlock.update(ours)
    value = _joined(_user_value, ours)
    if value:  # never "": kernels refuses an empty entry
        os.environ["LOCAL_KERNELS"] = value
    pinned = sum(1 for repo, path in builds.items() if ours.get(repo) == str(path))
    if not _told:
        _told = True
        logger.warning(
            "kernlock: kernels %s is a loader kernlock does not know (%s); %d locked kernel(s) are pinned to their "
            "verified builds through LOCAL_KERNELS instead. Not covered: %s. For every path, install a tested pair: "
            "%s.",
            version,
            reason,
            pinned,
            NOT_COVERED,
            INSTALL_KERNELS,
        )


def _joined(user: str, ours: dict[str, str]) -> str:
    return ":".join(filter(None, [user, *(f"{repo}={path}" for repo, path in ours.items())]))
