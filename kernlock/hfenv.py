"""The caches and the offline switch, read from the environment without importing huggingface_hub (~250 ms).

huggingface_hub reads ``HF_HUB_CACHE``/``HF_HOME``/``HF_HUB_OFFLINE`` once, at its import. When it is already
imported its values are the truth (the process may have changed the environment since); otherwise they are
derived from the environment the same way, so a command that makes no request never imports the network stack.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["cache_root", "hub_cache", "offline", "repo_folder"]

_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_cache() -> str:
    """``huggingface_hub.constants.HF_HUB_CACHE``."""
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        return str(constants.HF_HUB_CACHE)
    home = os.path.join(os.path.expanduser("~"), ".cache")
    hf_home = os.path.expandvars(
        os.path.expanduser(os.getenv("HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", home), "huggingface")))
    )
    legacy = os.getenv("HUGGINGFACE_HUB_CACHE", os.path.join(hf_home, "hub"))
    return os.path.expandvars(os.path.expanduser(os.getenv("HF_HUB_CACHE", legacy)))


def offline() -> bool:
    """``huggingface_hub.constants.HF_HUB_OFFLINE``."""
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        return bool(constants.HF_HUB_OFFLINE)
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.upper() in _TRUE


def repo_folder(repo: str, repo_type: str = "kernel") -> str:
    """``huggingface_hub.file_download.repo_folder_name``: ``kernels--org--name``."""
    return "--".join([f"{repo_type}s", *repo.split("/")])


def cache_root() -> Path:
    """kernlock's own cache: ``$KERNLOCK_CACHE``, else ``$XDG_CACHE_HOME/kernlock``, else ~/.cache/kernlock."""
    if os.environ.get("KERNLOCK_CACHE"):
        return Path(os.environ["KERNLOCK_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kernlock"
