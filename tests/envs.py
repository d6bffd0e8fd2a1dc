"""The environment a test gives a child process: one way to build it. :func:`clean_env` is this process's
environment without what a test must set itself; :func:`user_env_for` is a user's, with fresh caches (and a Hub)."""

from __future__ import annotations

import tempfile
from os import environ, geteuid
from pathlib import Path

from kernlock.testing import HubServer

# Variables that change what huggingface_hub/kernels do and must come from the test alone.
SCRUBBED = (
    "HF_HUB_OFFLINE",
    "HF_TOKEN",
    "HF_HUB_CACHE",
    "HF_HOME",
    "KERNELS_CACHE",
    "KERNLOCK_CACHE",
    "KERNLOCK_LOCKFILE",
    "KERNLOCK_MODE",
    "KERNLOCK_VERIFY",
    "LOCAL_KERNELS",
    "HF_HUB_DISABLE_TELEMETRY",
    "DO_NOT_TRACK",
    "DISABLE_TELEMETRY",
)


def test_trusted_root() -> str:
    """The trusted root of kernlock.testing's sigstore instance, which signs every fixture build (the same seed for
    every test Hub, so one file serves them all): the test machines trust it, as a CI that verifies a private
    instance's signatures names its root in ``KERNLOCK_SIGSTORE_TRUSTED_ROOT``."""
    from kernlock.testing.fixtures import write_trusted_root

    folder = Path(tempfile.gettempdir()) / f"kernlock-tests-{geteuid()}"
    return str(write_trusted_root(folder))


test_trusted_root.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the variables a test must set itself (SCRUBBED, and every ``HF_``,
    ``KERNELS_`` and ``KERNLOCK_`` variable), plus ``KERNLOCK_SIGSTORE_TRUSTED_ROOT`` (:func:`test_trusted_root`)
    and ``extra``."""
    env = {k: v for k, v in environ.items() if k not in SCRUBBED and not k.startswith(("HF_", "KERNELS_", "KERNLOCK_"))}
    env["KERNLOCK_SIGSTORE_TRUSTED_ROOT"] = test_trusted_root()
    env.update(extra)
    return env


def user_env_for(base: Path, hub: HubServer | None = None) -> dict[str, str]:
    """A user's environment with fresh Hub and kernlock caches under ``base``, pointed at ``hub`` (its
    :meth:`~kernlock.testing.HubServer.env`: the endpoint and the trusted root of its builds) when one is given."""
    env = clean_env(
        HF_HOME=str(base / "hf-home"),
        HF_HUB_CACHE=str(base / "hf-cache"),
        KERNLOCK_CACHE=str(base / "kernlock-cache"),
        HF_HUB_DISABLE_XET="1",
    )
    return {**env, **hub.env()} if hub is not None else env
