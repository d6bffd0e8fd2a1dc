"""kernlock's library API: what each command does, without parsing or printing (the CLI does that)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kernlock import lockfile
from kernlock import project as projects
from kernlock import sync as syncing
from kernlock.atomic import write_text_atomic
from kernlock.environment import Environment, detect
from kernlock.errors import KernlockError, LockError, ProjectError
from kernlock.hub import Hub
from kernlock.lockfile import Lock
from kernlock.project import Pin, Project, Requirement, Spec
from kernlock.resolver import Upgrade, latest_version, resolve


def target_environments(project: Project) -> list[Environment]:
    """The environments declared in [tool.kernlock], else this machine."""
    return list(project.environments) if project.environments else [detect()]


def stale_reason(project: Project, lock: Lock, environments: list[Environment]) -> str | None:
    """Why ``lock`` does not match the project (None when it does); asks no Hub."""
    if lock.requires_hash != project.requires_hash():
        return "[tool.kernlock] in pyproject.toml changed since kernels.lock was written"
    wanted = sorted(str(e) for e in environments)
    if sorted(lock.environments) != wanted:
        return f"kernels.lock covers {', '.join(lock.environments)}, but the project targets {', '.join(wanted)}"
    return None


def read_lock(project: Project) -> Lock:
    """The project's lock, validated."""
    return lockfile.read(project.lockfile)


@dataclass(frozen=True)
class LockResult:
    lock: Lock
    written: bool
    reason: str | None  # why it was (re)written, or None if it was up to date


def lock(root: Path, upgrade: Upgrade | None = None, check: bool = False, hub: Hub | None = None) -> LockResult:
    """Bring kernels.lock up to date with pyproject (or, with ``check``, only tell whether it is)."""
    project = projects.load(root)
    return _lock(project, upgrade or Upgrade(), check, hub)


def _lock(project: Project, upgrade: Upgrade, check: bool, hub: Hub | None) -> LockResult:
    if not project.pyproject.exists():
        raise ProjectError(
            f"no pyproject.toml in {project.root}; `kernlock add org/name` creates one, or point --project at the "
            "project folder."
        )
    for name in upgrade.kernels:
        if name not in project.requirements:
            raise ProjectError(f"--upgrade-kernel {name}: not a requirement in [tool.kernlock.kernels].")
    environments = target_environments(project)
    previous = None
    reason: str | None = "no kernels.lock yet"
    if project.lockfile.exists():
        try:
            previous = read_lock(project)
            reason = stale_reason(project, previous, environments)
        except LockError:
            if check:
                raise
            reason = "kernels.lock was unreadable and is re-created"
    if check:
        if reason is not None:
            raise LockError(f"kernels.lock is stale: {reason}; run `kernlock lock` and commit the result.")
        assert previous is not None
        return LockResult(previous, False, None)
    if reason is None and not upgrade.all and not upgrade.kernels:
        assert previous is not None
        return LockResult(previous, False, None)
    new = resolve(project, environments, hub or Hub(), previous, upgrade)
    written = _write_if_changed(project, previous, new)
    return LockResult(new, written, (reason or "upgrade") if written else None)


def _write_if_changed(project: Project, previous: Lock | None, new: Lock) -> bool:
    """Write ``new`` atomically unless its bytes equal ``previous``'s; True when written."""
    text = lockfile.dumps(new)
    if previous is not None and lockfile.dumps(previous) == text:
        return False
    write_text_atomic(project.lockfile, text)
    return True


@dataclass(frozen=True)
class AddResult:
    added: dict[str, str]  # repo -> recorded revision
    lock: LockResult


def add(root: Path, specs: list[str], trust: bool = False, hub: Hub | None = None) -> AddResult:
    """Record ``specs`` in pyproject and re-lock; nothing is written unless the whole resolution succeeds."""
    parsed = [Spec.parse(text) for text in specs]
    project = projects.load(root)
    hub = hub or Hub()
    environments = target_environments(project)
    added: dict[str, str] = {}
    requirements = dict(project.requirements)
    for spec in parsed:
        rev = spec.rev or latest_version(hub, spec.repo, environments)
        old = requirements.get(spec.repo)
        requirements[spec.repo] = Requirement(spec.repo, (Pin(rev),), trust or bool(old and old.trust))
        added[spec.repo] = rev
    candidate = replace(project, requirements=requirements)
    previous = None
    if project.lockfile.exists():
        try:
            previous = read_lock(project)
        except LockError:
            previous = None
    new = resolve(candidate, environments, hub, previous)
    projects.set_requirements(project, {repo: (rev, requirements[repo].trust) for repo, rev in added.items()})
    written = _write_if_changed(project, previous, new)
    return AddResult(added, LockResult(new, written, "added " + ", ".join(added)))


def remove(root: Path, names: list[str], hub: Hub | None = None) -> LockResult:
    """Drop requirements from pyproject and re-lock."""
    project = projects.load(root)
    unknown = [name for name in names if name not in project.requirements]
    if unknown:
        known = ", ".join(sorted(project.requirements)) or "none"
        raise ProjectError(
            f"{', '.join(unknown)} not in [tool.kernlock.kernels] (requirements: {known}); `kernlock show` lists them."
        )
    requirements = {k: v for k, v in project.requirements.items() if k not in names}
    candidate = replace(project, requirements=requirements)
    previous = read_lock(project) if project.lockfile.exists() else None
    new = resolve(candidate, target_environments(project), hub or Hub(), previous)
    projects.remove_requirements(project, names)
    written = _write_if_changed(project, previous, new)
    return LockResult(new, written, "removed " + ", ".join(names))


def env_report(root: Path) -> dict:
    """This machine's environment, library versions, the transformers gate, and each locked kernel's variant."""
    from kernlock.compat import SUPPORTED, installed, transformers_gate

    environment = str(detect())
    report: dict = {
        "environment": environment,
        "versions": {name: installed(name) for name in SUPPORTED},
        "kernels": [],
    }
    gate = transformers_gate()
    if gate is not None:
        report["transformers_gate"] = {"ok": gate.ok, "message": gate.message()}
    project = projects.load(root)
    if project.lockfile.exists():
        try:
            lock = read_lock(project)
        except LockError as err:
            report["lock_error"] = str(err)
            return report
        for repo in lock.repos:
            entry = lock.entry_for(repo, environment)
            variant = entry.variant_for(environment) if entry else None
            report["kernels"].append(
                {
                    "repo": repo,
                    "commit": entry.commit if entry else None,
                    "variant": variant.name if variant else None,
                }
            )
    return report


# -- sync / verify / show (issue #4) -----------------------------------------------------------------------


def _this_environment(lock: Lock) -> str:
    """This machine's environment string, which must be one the lock covers."""
    env = str(detect())
    if env not in lock.environments:
        raise LockError(
            f"this machine ({env}) is not an environment of kernels.lock (it covers {', '.join(lock.environments)}); "
            "add it to `environments` in [tool.kernlock] and run `kernlock lock`, or fill a shared cache with "
            "`kernlock sync --all-environments`."
        )
    return env


def _lock_for_sync(project: Project, locked: bool, frozen: bool, offline: bool, hub: Hub | None) -> LockResult:
    """The lock to sync: as is (``frozen``), checked (``locked``, ``offline``), or re-locked when stale."""
    if frozen:
        return LockResult(read_lock(project), False, None)
    if locked or offline:
        try:
            return _lock(project, Upgrade(), True, hub)
        except LockError as err:
            if not offline or locked:
                raise
            raise LockError(
                f"{err} `--offline` cannot re-lock: run `kernlock lock` online first, or use the lock as it is "
                "with `kernlock sync --offline --frozen`."
            ) from err
    return _lock(project, Upgrade(), False, hub)


def sync(
    root: Path,
    all_environments: bool = False,
    locked: bool = False,
    frozen: bool = False,
    offline: bool = False,
    hub: Hub | None = None,
    progress: bool = True,
) -> syncing.SyncReport:
    """Download and verify the locked files this environment needs (``all_environments``: every locked one).

    Default: re-lock first when kernels.lock is stale; ``locked``: fail instead; ``frozen``: use it as is.
    ``offline``: no request; verify what is in the cache and fail naming anything missing or corrupt.
    """
    from huggingface_hub import constants

    if locked and frozen:
        raise LockError("--locked and --frozen cannot be combined: --locked checks kernels.lock, --frozen trusts it.")
    offline = offline or constants.HF_HUB_OFFLINE
    project = projects.load(root)
    result = _lock_for_sync(project, locked, frozen, offline, hub)
    environments = list(result.lock.environments) if all_environments else [_this_environment(result.lock)]
    report = syncing.sync(result.lock, environments, hub=hub, offline=offline, progress=progress)
    return replace(report, relocked=result.reason if result.written else None)


def sync_after_add(lock: Lock, hub: Hub | None = None) -> syncing.SyncReport | None:
    """Sync this machine with the lock `add` just wrote; None when the lock does not cover this machine."""
    from huggingface_hub import constants

    environment = str(detect())
    if environment not in lock.environments:
        return None
    return syncing.sync(lock, [environment], hub=hub, offline=constants.HF_HUB_OFFLINE)


def verify(root: Path, all_environments: bool = False) -> syncing.VerifyResult:
    """Re-hash every locked file in the cache; this environment's variants (``all_environments``: every
    locked variant) must be present. Returns the problems; empty means intact."""
    lock = read_lock(projects.load(root))
    if all_environments:
        required = list(lock.environments)
    else:
        try:
            required = [env for env in [str(detect())] if env in lock.environments]
        except KernlockError:
            required = []
    return syncing.verify(lock, required)


def show(root: Path) -> list[dict]:
    """One row per lock entry: kernel, requested, resolved ref, commit, this environment's variant, synced."""
    lock = read_lock(projects.load(root))
    try:
        env: str | None = str(detect())
    except KernlockError:
        env = None
    rows = []
    for kernel in lock.kernels:
        variant = kernel.variant_for(env) if env else None
        rows.append(
            {
                "repo": kernel.repo,
                "requested": kernel.requested,
                "ref": kernel.ref,
                "commit": kernel.commit,
                "environments": list(kernel.environments),
                "required_by": list(kernel.required_by),
                "environment": env,
                "variant": variant.name if variant else None,
                "synced": syncing.is_synced(kernel, variant) if variant else None,
                "path": str(syncing.variant_path(kernel, variant)) if variant else None,
            }
        )
    return rows
