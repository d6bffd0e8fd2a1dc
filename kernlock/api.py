"""kernlock's library API: what each command does, without parsing or printing (the CLI does that)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kernlock import foreign, hfenv, interrupt, lockfile
from kernlock import project as projects
from kernlock.atomic import write_text_atomic
from kernlock.environment import Environment, detect, detect_with_facts
from kernlock.errors import DuplicateSpecError, ForeignLockError, KernlockError, LockError, ProjectError
from kernlock.lockfile import Lock
from kernlock.project import Pin, Project, Requirement, Spec
from kernlock.resolver import Upgrade, latest_version, resolve
from kernlock.variants import RULE

if TYPE_CHECKING:  # kernlock.hub imports huggingface_hub and httpx: only a command that makes a request does
    from kernlock import sync as syncing
    from kernlock.foreign import ForeignPin
    from kernlock.hub import Hub
    from kernlock.migrate import ImportResult
    from kernlock.mirror import MirrorApp
    from kernlock.outdated import Report
    from kernlock.verify import VerifyResult


def _hub(hub: Hub | None) -> Hub:
    """``hub``, else a new client for $HF_ENDPOINT (importing the network stack now)."""
    if hub is not None:
        return hub
    from kernlock.hub import Hub

    return Hub()


def target_environments(project: Project) -> list[Environment]:
    """The environments declared in [tool.kernlock], else this machine."""
    return list(project.environments) if project.environments else [detect()]


def stale_reason(project: Project, lock: Lock, environments: list[Environment]) -> str | None:
    """Why ``lock`` does not match the project (None when it does); asks no Hub.

    Besides the requirements' digest, every direct entry must satisfy pyproject: the repo set, each environment's
    revision (``when`` pins included), a pinned sha's commit, and the environments.
    """
    if lock.requires_hash != project.requires_hash():
        return "[tool.kernlock] in pyproject.toml changed since kernels.lock was written"
    if lock.variant_rule != RULE:
        return f"kernels.lock chose its variants by the {lock.variant_rule} loader rule; this kernlock follows {RULE}"
    wanted = sorted(str(e) for e in environments)
    if sorted(lock.environments) != wanted:
        return f"kernels.lock covers {', '.join(lock.environments)}, but the project targets {', '.join(wanted)}"
    for repo in sorted(project.requirements):
        for env in environments:
            pin = project.requirements[repo].pin_for(env)
            entry = lock.entry_for(repo, str(env))
            if entry is None:
                return f"kernels.lock has no entry for {repo} on {env}"
            if entry.requested != pin.rev:
                return f"kernels.lock locks {repo} at {entry.requested!r} on {env}; pyproject.toml asks for {pin.rev!r}"
            if len(pin.rev) == 40 and entry.commit != pin.rev.lower():
                return (
                    f"kernels.lock locks {repo} to commit {entry.commit[:12]}, but pyproject.toml pins {pin.rev[:12]}"
                )
    for entry in lock.kernels:
        if entry.repo in project.requirements:
            continue
        if not entry.required_by:
            return f"kernels.lock locks {entry.repo}, which pyproject.toml does not ask for"
        orphaned = [repo for repo in entry.required_by if not lock.entries(repo)]
        if orphaned:
            return f"kernels.lock locks {entry.repo} for {', '.join(orphaned)}, which it does not lock"
    return None


def read_lock(project: Project) -> Lock:
    """The project's lock, validated (a missing pyproject.toml is named first)."""
    if not project.pyproject.exists():
        raise ProjectError(
            f"no pyproject.toml in {project.root}; create one with `kernlock add org/name`, or point --project at "
            "the project folder."
        )
    foreign.check_project(project.root)
    return lockfile.read(project.lockfile)


@dataclass(frozen=True)
class LockResult:
    lock: Lock
    written: bool
    reason: str | None  # why it was (re)written, or None if it was up to date
    previous: Lock | None = None  # the lock it replaced (or would replace, with ``dry_run``), if it was readable


def lock(
    root: Path | None = None,
    upgrade: Upgrade | None = None,
    check: bool = False,
    hub: Hub | None = None,
    dry_run: bool = False,
) -> LockResult:
    """Bring kernels.lock up to date with pyproject (or, with ``check``, only tell whether it is).

    ``root``: the project folder; None finds the nearest enclosing project (as every function here does).
    ``dry_run``: resolve as `lock` would, but write nothing (``written`` then says whether it would write).
    """
    interrupt.reset()
    project = projects.load(projects.locate(root))
    return _lock(project, upgrade or Upgrade(), check, hub, dry_run)


def _lock(project: Project, upgrade: Upgrade, check: bool, hub: Hub | None, dry_run: bool = False) -> LockResult:
    if not project.pyproject.exists():
        raise ProjectError(
            f"no pyproject.toml in {project.root}; `kernlock add org/name` creates one, or point --project at the "
            "project folder."
        )
    foreign.check_project(project.root)
    for name in upgrade.kernels:
        if name not in project.requirements:
            raise ProjectError(f"--upgrade-kernel {name}: not a requirement in [tool.kernlock.kernels].")
    environments = target_environments(project)
    previous = None
    reason: str | None = "no kernels.lock yet"
    if project.lockfile.exists():
        try:
            previous = lockfile.read(project.lockfile)  # pyproject and a foreign lock were checked above
            reason = stale_reason(project, previous, environments)
        except ForeignLockError:
            raise
        except LockError as err:
            if check:
                raise
            previous, reason = _previous_pins(project, err)
    if check:
        if reason is not None:
            raise LockError(f"kernels.lock is stale: {reason}; run `kernlock lock` and commit the result.")
        assert previous is not None
        return LockResult(previous, False, None)
    if reason is None and not upgrade.all and not upgrade.kernels:
        assert previous is not None
        return LockResult(previous, False, None)
    new = resolve(project, environments, _hub(hub), previous, upgrade)
    written = _write_if_changed(project, new, dry_run)
    return LockResult(new, written, (reason or "upgrade") if written else None, previous)


def _previous_pins(project: Project, error: LockError) -> tuple[Lock | None, str]:
    """The pins of a lock that failed the strict read (an older lock-version, a re-formatted file) and why it is
    rewritten; a lock whose content fails its checks keeps no pin and is re-created from the Hub."""
    try:
        return lockfile.read_pins(project.lockfile), "kernels.lock is rewritten in the current format (pins kept)"
    except ForeignLockError:
        raise
    except LockError:
        return None, f"kernels.lock failed its checks and is re-created from the Hub ({error})"


def _write_if_changed(project: Project, new: Lock, dry_run: bool = False) -> bool:
    """Write ``new`` atomically unless kernels.lock already holds exactly its bytes; True when written (with
    ``dry_run``: when it would be written; nothing is)."""
    text = lockfile.dumps(new)
    try:
        if project.lockfile.read_bytes() == text.encode():
            return False
    except OSError:
        pass  # no lock yet (or unreadable): write it
    if not dry_run:
        write_text_atomic(project.lockfile, text)
    return True


@dataclass(frozen=True)
class AddResult:
    added: dict[str, str]  # repo -> recorded revision
    lock: LockResult
    created: Path | None = None  # the pyproject.toml `add` created (no enclosing project was found)


def add(root: Path | None, specs: list[str], trust: bool = False, hub: Hub | None = None) -> AddResult:
    """Record ``specs`` in pyproject and re-lock; nothing is written unless the whole resolution succeeds.

    With no ``root`` and no enclosing project, the project is created in the current folder (``created``).
    """
    interrupt.reset()
    parsed = [Spec.parse(text) for text in specs]
    repos = [spec.repo.casefold() for spec in parsed]
    twice = sorted({spec.repo for spec in parsed if repos.count(spec.repo.casefold()) > 1})
    if twice:
        raise DuplicateSpecError(f"{', '.join(twice)} is given more than once; name each kernel once (org/name[@rev]).")
    found = projects.locate(root) if root is not None else projects.find_root()
    project = projects.load(found or Path.cwd())
    foreign.check_project(project.root)
    hub = _hub(hub)
    environments = target_environments(project)
    added: dict[str, str] = {}
    requirements = dict(project.requirements)
    for spec in parsed:
        rev = spec.rev or latest_version(hub, spec.repo, environments)
        same = [repo for repo in requirements if repo.casefold() == spec.repo.casefold()]
        old = requirements.pop(same[0]) if same else None  # repo ids are not case-sensitive: one entry
        requirements[spec.repo] = Requirement(spec.repo, (Pin(rev),), trust or bool(old and old.trust))
        added[spec.repo] = rev
    candidate = replace(project, requirements=requirements)
    previous = None
    if project.lockfile.exists():
        try:
            previous = lockfile.read_pins(project.lockfile)
        except ForeignLockError:
            raise
        except LockError:
            previous = None
    new = resolve(candidate, environments, hub, previous)
    created = not project.pyproject.exists()
    projects.set_requirements(project, {repo: (rev, requirements[repo].trust) for repo, rev in added.items()})
    written = _write_if_changed(project, new)
    return AddResult(
        added, LockResult(new, written, "added " + ", ".join(added)), project.pyproject if created else None
    )


def remove(root: Path | None, names: list[str], hub: Hub | None = None) -> LockResult:
    """Drop requirements (``org/name``, also written ``org/name@rev``) from pyproject and re-lock."""
    interrupt.reset()
    names = [Spec.parse(name).repo for name in names]
    project = projects.load(projects.locate(root))
    foreign.check_project(project.root)
    unknown = [name for name in names if name not in project.requirements]
    if unknown:
        known = ", ".join(sorted(project.requirements)) or "none"
        raise ProjectError(
            f"{', '.join(unknown)} not in [tool.kernlock.kernels] (requirements: {known}); `kernlock show` lists them."
        )
    requirements = {k: v for k, v in project.requirements.items() if k not in names}
    candidate = replace(project, requirements=requirements)
    previous = lockfile.read_pins(project.lockfile) if project.lockfile.exists() else None
    new = resolve(candidate, target_environments(project), _hub(hub), previous)
    projects.remove_requirements(project, names)
    written = _write_if_changed(project, new)
    return LockResult(new, written, "removed " + ", ".join(names))


def env_report(root: Path | None = None) -> dict:
    """This machine's environment, library versions, the transformers gate, and each locked kernel's variant."""
    from kernlock import facts
    from kernlock.compat import SUPPORTED, installed, legacy_loader, transformers_gate

    machine = detect_with_facts()
    environment = str(machine)
    report: dict = {
        "environment": environment,
        "declared": {"name": environment, **machine.extras.as_data()},
        "versions": {name: installed(name) for name in SUPPORTED},
        "kernels": [],
    }
    gate = transformers_gate()
    if gate is not None:
        report["transformers_gate"] = {"ok": gate.ok, "message": gate.message()}
    unsupported = legacy_loader()
    if unsupported is not None:
        report["unsupported_loader"] = unsupported
    # The installed loader's generation (read from its files: kernels is not imported) and what kernlock covers.
    from kernlock import loaders

    probe = loaders.probe_files()
    report["loader"] = {"generation": probe.generation, "kernels": probe.kernels}
    if probe.missing:
        report["loader"]["missing"] = list(probe.missing)
    gated = None
    if gate is not None and not gate.ok:
        gated = f"transformers {gate.transformers} loads no Hub kernel with kernels {gate.kernels} (its version gate)"
    report["load_paths"] = loaders.load_paths(probe.generation, gated)
    found = projects.locate(root) if root is not None else projects.find_root()
    project = projects.load(found or Path.cwd())
    if project.lockfile.exists():
        try:
            lock = read_lock(project)
        except LockError as err:
            report["lock_error"] = str(err)
            return report
        differ = facts.differences(lock.facts_for(environment), report["declared"])
        if differ:
            report["facts_differ"] = differ
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
    root: Path | None = None,
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
    from kernlock import sync as syncing

    if locked and frozen:
        raise LockError("--locked and --frozen cannot be combined: --locked checks kernels.lock, --frozen trusts it.")
    interrupt.reset()
    offline = offline or hfenv.offline()
    project = projects.load(projects.locate(root))
    result = _lock_for_sync(project, locked, frozen, offline, hub)
    environments = list(result.lock.environments) if all_environments else [_this_environment(result.lock)]
    report = syncing.sync(result.lock, environments, hub=hub, offline=offline, progress=progress)
    return replace(report, relocked=result.reason if result.written else None)


def sync_after_add(lock: Lock, hub: Hub | None = None) -> syncing.SyncReport | None:
    """Sync this machine with the lock `add` just wrote; None when the lock does not cover this machine."""
    from kernlock import sync as syncing

    environment = str(detect())
    if environment not in lock.environments:
        return None
    return syncing.sync(lock, [environment], hub=hub, offline=hfenv.offline())


def verify(root: Path | None = None, all_environments: bool = False) -> VerifyResult:
    """Re-hash every locked file in the cache; this environment's variants (``all_environments``: every
    locked variant) must be present. Returns the problems; none (``.ok``) means intact."""
    from kernlock import verify as verifying

    lock = read_lock(projects.load(projects.locate(root)))
    if all_environments:
        required = list(lock.environments)
    else:
        try:
            required = [env for env in [str(detect())] if env in lock.environments]
        except KernlockError:
            required = []
    return verifying.verify(lock, required)


@dataclass(frozen=True)
class ShowResult:
    rows: list[dict]  # one per lock entry
    stale: str | None  # why kernels.lock no longer matches pyproject.toml, or None


def show(root: Path | None = None) -> ShowResult:
    """One row per lock entry: kernel, requested, resolved ref, commit, this environment's variant, synced; and
    whether the lock is stale."""
    from kernlock import cache, variantcheck

    project = projects.load(projects.locate(root))
    lock = read_lock(project)
    try:
        stale = stale_reason(project, lock, target_environments(project))
    except KernlockError as err:
        stale = str(err)
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
                "synced": variantcheck.is_synced(kernel, variant) if variant else None,
                "path": str(cache.variant_path(kernel, variant)) if variant else None,
            }
        )
    return ShowResult(rows, stale)


# -- import / export / outdated (issue #14) --------------------------------------------------------------------


def import_kernels(root: Path | None = None, trust: bool = False, hub: Hub | None = None) -> ImportResult:
    """`kernlock import`: the kernels library's [tool.kernels.dependencies] and JSON lock -> kernlock's."""
    from kernlock import migrate

    return migrate.import_project(root, trust=trust, hub=hub)


def export(root: Path | None, fmt: str, output: Path, environment: str | None = None) -> list[ForeignPin]:
    """`kernlock export`: the locked commits in another tool's lock format, written to ``output``."""
    from kernlock import export as exporting

    project = projects.load(projects.locate(root))
    lock = read_lock(project)
    reason = stale_reason(project, lock, target_environments(project))
    if reason is not None:  # the export would lack (or misstate) what pyproject.toml asks for
        raise LockError(f"kernels.lock is stale: {reason}; run `kernlock lock`, then export again.")
    return exporting.export(lock, fmt, output, environment)


def outdated(root: Path | None = None, hub: Hub | None = None) -> Report:
    """`kernlock outdated`: moved refs, newer versions and what `lock --upgrade` would change, per locked kernel."""
    from kernlock import outdated as outdating

    interrupt.reset()
    project = projects.load(projects.locate(root))
    lock = read_lock(project)
    return outdating.report(project, lock, target_environments(project), _hub(hub))


# -- bundles (air-gapped sites) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleResult:
    path: Path
    size: int  # bytes
    files: int
    variants: int
    environments: tuple[str, ...]
    downloaded: int  # files sync fetched into the cache first


def bundle(root: Path | None, out: Path, environments: list[str] | None = None, progress: bool = True) -> BundleResult:
    """Write one deterministic archive holding kernels.lock, a manifest and every locked file of
    ``environments`` (None: every environment of the lock), from the verified cache (synced first)."""
    from kernlock import bundle as bundles
    from kernlock import names
    from kernlock import sync as syncing

    project = projects.load(projects.locate(root))
    target = Path(out).resolve()
    if target.is_dir() or target in (project.lockfile.resolve(), project.pyproject.resolve()):
        what = "a folder" if target.is_dir() else "one of the project's own files"
        raise KernlockError(f"-o {out} is {what}; name a new file for the bundle, e.g. `-o kernels-bundle.tar`.")
    lock = read_lock(project)
    envs = sorted(set(environments)) if environments else list(lock.environments)
    report = syncing.sync(lock, envs, progress=progress)  # no request when the cache already holds them
    pairs = syncing.targets(lock, envs)
    sources = {
        bundles.member_name(e, v, f): names.under(syncing.variant_path(e, v), *f.path.split("/"))
        for e, v in pairs
        for f in v.files
    }
    size = bundles.write(out, project.lockfile.read_bytes(), pairs, envs, sources)
    return BundleResult(Path(out), size, len(sources), len(pairs), tuple(envs), report.downloaded_files)


def sync_from(
    root: Path | None, path: Path, all_environments: bool = False, progress: bool = True
) -> syncing.SyncReport:
    """Install this environment's locked files (``all_environments``: every locked one) from a bundle made for
    this very kernels.lock, with no network: every file is checked before anything is installed, and again
    before it becomes visible. An interrupted run resumes."""
    import hashlib

    from kernlock import bundle as bundles
    from kernlock import sync as syncing

    project = projects.load(projects.locate(root))
    lock = read_lock(project)
    source = bundles.load(path)
    mine = hashlib.sha256(project.lockfile.read_bytes()).hexdigest()
    theirs = source.manifest["lock-sha256"]
    if mine != theirs:
        raise bundles.BundleError(
            f"{path} was made for another kernels.lock (sha256 {theirs[:12]}), not {project.lockfile} (sha256 "
            f"{mine[:12]}); nothing was installed. Run `kernlock bundle` with this project's lock on the connected "
            "machine, or sync the project the bundle was made for."
        )
    environments = list(lock.environments) if all_environments else [_this_environment(lock)]
    source.check(syncing.targets(lock, environments))
    interrupt.reset()
    return syncing.sync(lock, environments, hub=source, progress=progress)


def mirror_app(root: Path | None, bundle: Path | None = None, cache: Path | None = None) -> MirrorApp:
    """The Hub mirror of a bundle (its own lock, every file checked), or of the project's kernels.lock over the
    verified files of a kernel cache (default: this machine's)."""
    from kernlock import mirror
    from kernlock import sync as syncing

    if bundle is not None and cache is not None:
        raise KernlockError("serve from a bundle (--from) or from a kernel cache (--cache), not both.")
    if bundle is not None:
        return mirror.MirrorApp(mirror.from_bundle(bundle))
    lock = read_lock(projects.load(projects.locate(root)))
    return mirror.MirrorApp(mirror.from_cache(lock, cache or syncing.cache_dir()))


def serve(app: MirrorApp, host: str, port: int, workers: int, threads: int, access_log: str) -> None:
    """Run the mirror with the production server until interrupted."""
    from kernlock import mirror

    mirror.run(app, host, port, workers, threads, access_log)
