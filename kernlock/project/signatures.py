"""``[tool.kernlock.signatures]``: which signers a locked build may come from, against which trusted root, and
whether an unsigned build is allowed (docs/pyproject.md). Parsing only: sigstore is imported by
:mod:`kernlock.signing.bundle`, when something is verified."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernlock.errors import ProjectError
from kernlock.util.wording import unknown_keys

__all__ = [
    "DEFAULT_SIGNERS",
    "GITHUB_ISSUER",
    "MODES",
    "TRUSTED_ROOT_VARIABLE",
    "SignaturePolicy",
    "Signer",
    "parse",
]

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
MODES = ("require", "verify", "off")
TRUSTED_ROOT_VARIABLE = "KERNLOCK_SIGSTORE_TRUSTED_ROOT"


@dataclass(frozen=True, slots=True, kw_only=True)
class Signer:
    """One accepted signer: a GitHub source repository and the build workflows (signer URIs) it signs with."""

    repository: str
    workflows: tuple[str, ...]
    issuer: str = GITHUB_ISSUER

    def as_data(self) -> dict[str, Any]:
        return {"repository": self.repository, "workflows": list(self.workflows), "issuer": self.issuer}

    def describe(self) -> str:
        return f"{self.repository} ({', '.join(self.workflows)})"


def _kernels_community(*workflows: str) -> Signer:
    base = "https://github.com/huggingface/kernels-community/.github/workflows"
    return Signer(
        repository="huggingface/kernels-community", workflows=tuple(f"{base}/{w}@refs/heads/main" for w in workflows)
    )


#: The kernels library's own default signers (kernels 0.17 ``kernels/verify.py``, ``DEFAULT_POLICIES``).
DEFAULT_SIGNERS = (_kernels_community("build.yaml", "build-mac.yaml", "build-windows.yaml", "sign-old-builds.yaml"),)


@dataclass(frozen=True, slots=True, kw_only=True)
class SignaturePolicy:
    """The project's signature policy (the defaults when pyproject.toml has no table)."""

    mode: str = "verify"
    trusted_root: str | None = None  # as written in pyproject.toml, relative to the project
    signers: tuple[Signer, ...] = DEFAULT_SIGNERS
    declared: bool = False  # whether pyproject.toml has the table (only then it counts in requires-hash)

    def as_data(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "trusted-root": self.trusted_root,
            "signers": [s.as_data() for s in self.signers],
        }

    def trusted_root_path(self, root: Path | None) -> Path | None:
        """The trusted root to verify against: ``$KERNLOCK_SIGSTORE_TRUSTED_ROOT``, else the table's
        ``trusted-root`` (relative to the project folder ``root``), else None (sigstore's public-good root)."""
        override = os.environ.get(TRUSTED_ROOT_VARIABLE)
        if override:
            return Path(override)
        if self.trusted_root is None:
            return None
        path = Path(self.trusted_root)
        return path if path.is_absolute() or root is None else root / path


_TABLE = "[tool.kernlock.signatures]"
_KEYS = ("mode", "trusted-root", "signer")
_SIGNER_KEYS = ("repository", "workflows", "issuer")


def parse(value: Any, where: Path) -> SignaturePolicy:
    """The policy from the table's plain value (ProjectError naming the fix for anything else)."""
    if value is None:
        return SignaturePolicy()
    if not isinstance(value, dict):
        raise ProjectError(f"{where}: {_TABLE} must be a table.")
    unknown = set(value) - set(_KEYS)
    if unknown:
        raise ProjectError(f"{where}: {unknown_keys(unknown, _KEYS, _TABLE)}.")
    mode = value.get("mode", "verify")
    if mode not in MODES:
        raise ProjectError(f'{where}: {_TABLE} mode must be "require", "verify" or "off", not {mode!r}.')
    root = value.get("trusted-root")
    if root is not None and (not isinstance(root, str) or not root):
        raise ProjectError(f"{where}: {_TABLE} trusted-root must be a path to a sigstore trusted_root.json.")
    signers = value.get("signer")
    parsed: tuple[Signer, ...]
    if signers is None:
        parsed = DEFAULT_SIGNERS
    else:
        if not isinstance(signers, list) or not signers:
            raise ProjectError(f"{where}: [[tool.kernlock.signatures.signer]] must be an array of tables.")
        parsed = tuple(_signer(item, where, i) for i, item in enumerate(signers))
    return SignaturePolicy(mode=mode, trusted_root=root, signers=parsed, declared=True)


def _signer(item: Any, where: Path, index: int) -> Signer:
    prefix = f"{where}: [[tool.kernlock.signatures.signer]] #{index + 1}"
    if not isinstance(item, dict):
        raise ProjectError(f"{prefix} must be a table with `repository` and `workflows`.")
    unknown = set(item) - set(_SIGNER_KEYS)
    if unknown:
        raise ProjectError(f"{prefix}: {unknown_keys(unknown, _SIGNER_KEYS)}.")
    repository = item.get("repository")
    if not isinstance(repository, str) or repository.count("/") != 1 or repository.startswith("https:"):
        raise ProjectError(f'{prefix}: `repository` must be a GitHub owner/name, e.g. "huggingface/kernels-community".')
    workflows = item.get("workflows")
    if (
        not isinstance(workflows, list)
        or not workflows
        or not all(isinstance(w, str) and w.startswith("https://") for w in workflows)
    ):
        raise ProjectError(
            f"{prefix}: `workflows` must be a list of build signer URIs, e.g. "
            '["https://github.com/huggingface/kernels-community/.github/workflows/build.yaml@refs/heads/main"].'
        )
    issuer = item.get("issuer", GITHUB_ISSUER)
    if not isinstance(issuer, str) or not issuer.startswith("https://"):
        raise ProjectError(f"{prefix}: `issuer` must be an OIDC issuer URL, e.g. {GITHUB_ISSUER!r}.")
    return Signer(repository=repository, workflows=tuple(workflows), issuer=issuer)
