"""Air-gapped sites: `kernlock bundle`, `sync --from` a bundle, and `kernlock serve` (a Hub mirror)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernlock.commands.lock import read_lock
from kernlock.commands.sync import NO_TORCH, NotSynced, this_environment
from kernlock.errors import ArgumentError, BundleError, NoEnvironmentError
from kernlock.project import inputs as projects
from kernlock.util import interrupt

if TYPE_CHECKING:
    from collections.abc import Callable

    from kernlock.airgap.mirror import MirrorApp
    from kernlock.sync import engine as syncing

__all__ = ["BundleResult", "bundle", "mirror_app", "serve", "sync_from"]


@dataclass(frozen=True, slots=True, kw_only=True)
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
    from kernlock.airgap import bundle as bundles
    from kernlock.sync import engine as syncing
    from kernlock.util import names

    project = projects.load(projects.locate(root))
    target = Path(out).resolve()
    if target.is_dir() or target in (project.lockfile.resolve(), project.pyproject.resolve()):
        what = "a folder" if target.is_dir() else "one of the project's own files"
        raise ArgumentError(f"-o {out} is {what}", fix="name a new file for the bundle, e.g. `-o kernels-bundle.tar`")
    lock = read_lock(project)
    envs = sorted(set(environments)) if environments else list(lock.environments)
    trusted_root = project.signatures.trusted_root_path(project.root)
    report = syncing.sync(lock, envs, progress=progress, trusted_root=trusted_root)  # no request when cached
    pairs = syncing.targets(lock, envs)
    sources = {
        bundles.member_name(e, v, f): names.under(syncing.variant_path(e, v), *f.path.split("/"))
        for e, v in pairs
        for f in v.files
    }
    size = bundles.write(out, project.lockfile.read_bytes(), pairs, envs, sources)
    return BundleResult(
        path=Path(out),
        size=size,
        files=len(sources),
        variants=len(pairs),
        environments=tuple(envs),
        downloaded=report.downloaded_files,
    )


def sync_from(
    root: Path | None, path: Path, all_environments: bool = False, progress: bool = True
) -> syncing.SyncReport | NotSynced:
    """Install this environment's locked files (``all_environments``: every locked one) from a bundle made for
    this very kernels.lock, with no network: every file is checked before anything is installed, and again
    before it becomes visible. An interrupted run resumes. A machine without torch installs nothing unless
    ``all_environments`` (:class:`NotSynced`)."""
    import hashlib

    from kernlock.airgap import bundle as bundles
    from kernlock.sync import engine as syncing

    project = projects.load(projects.locate(root))
    lock = read_lock(project)
    source = bundles.load(path)
    mine = hashlib.sha256(project.lockfile.read_bytes()).hexdigest()
    theirs = source.manifest["lock-sha256"]
    if mine != theirs:
        raise BundleError(
            f"{path} was made for another kernels.lock (sha256 {theirs[:12]}), not {project.lockfile} (sha256 "
            f"{mine[:12]}); nothing was installed",
            fix="Run `kernlock bundle` with this project's lock on the connected machine, or sync the project the "
            "bundle was made for",
        )
    try:
        environments = list(lock.environments) if all_environments else [this_environment(lock)]
    except NoEnvironmentError:
        return NotSynced(why=NO_TORCH, no_torch=True)
    source.check(syncing.targets(lock, environments))
    interrupt.reset()
    from dataclasses import replace

    trusted_root = project.signatures.trusted_root_path(project.root)
    report = syncing.sync(lock, environments, hub=source, progress=progress, trusted_root=trusted_root)
    return replace(report, source=path)


def mirror_app(root: Path | None, bundle: Path | None = None, cache: Path | None = None) -> MirrorApp:
    """The Hub mirror of a bundle (its own lock, every file checked), or of the project's kernels.lock over the
    verified files of a kernel cache (default: this machine's)."""
    from kernlock.airgap import mirror
    from kernlock.sync import engine as syncing

    if bundle is not None and cache is not None:
        raise ArgumentError(
            "--from and --cache name two sources",
            fix="serve from a bundle (--from) or from a kernel cache (--cache), not both",
        )
    if bundle is not None:
        return mirror.MirrorApp(mirror.from_bundle(bundle))
    lock = read_lock(projects.load(projects.locate(root)))
    return mirror.MirrorApp(mirror.from_cache(lock, cache or syncing.cache_dir()))


def serve(
    app: MirrorApp,
    host: str,
    port: int,
    workers: int,
    threads: int,
    access_log: str,
    announce: Callable[[], None] | None = None,
) -> None:
    """Run the mirror with the production server until interrupted (``announce``: called once it can start)."""
    from kernlock.airgap import mirror

    mirror.run(app, host, port, workers, threads, access_log, announce)
