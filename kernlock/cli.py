"""The kernlock command line: parse arguments, call kernlock.api, print. No logic of its own."""

from __future__ import annotations

import functools
import os
import sys

import click

from kernlock import __version__
from kernlock.errors import DuplicateSpecError, KernlockError
from kernlock.wording import count

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from kernlock import api

# Each command imports kernlock.api (and with it the lock model) when it runs: `--help` and `--version` cost
# what click costs. The network stack (huggingface_hub, httpx) is imported only when a request is made.

project_option = click.option(
    "--project",
    "project_dir",
    metavar="DIRECTORY",
    callback=lambda _ctx, param, value: _project(param, value),
    default=None,
    help="Project directory (holds pyproject.toml and kernels.lock); default: the nearest enclosing project.",
)


def _project(param: click.Parameter, value: str | None) -> Path | None:
    """``--project``: an existing folder, as a Path (checked here rather than by click.Path, whose import-time
    translations and pathlib would cost ``--help`` and ``--version``)."""
    if value is None:
        return None
    from pathlib import Path

    path = Path(value)
    if not path.exists():
        raise click.BadParameter(f"Directory {value!r} does not exist.", param=param)
    if not path.is_dir():
        raise click.BadParameter(f"Directory {value!r} is a file.", param=param)
    return path


def _path(value: str | None, param: click.Parameter, folder: bool) -> Path | None:
    """A file (``folder`` False) or folder option as a Path; an existing path of the other kind is a usage error
    (pathlib is imported only when the option is given)."""
    if value is None:
        return None
    from pathlib import Path

    path = Path(value)
    if path.exists() and path.is_dir() != folder:
        raise click.BadParameter(f"{value!r} is {'a file' if folder else 'a directory'}.", param=param)
    return path


def _file(_ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    return _path(value, param, folder=False)


def _folder(_ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    return _path(value, param, folder=True)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: what click's version_option prints, without the locale lookup it imports."""
    if value and not ctx.resilient_parsing:
        click.echo(f"kernlock, version {__version__}")
        ctx.exit()


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Print a KernlockError as one clear message and exit 1; a traceback only with -v."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from kernlock import interrupt

        try:
            return fn(*args, **kwargs)
        except (interrupt.Interrupted, interrupt.Cancelled) as err:
            _interrupted(getattr(err, "exit_code", 130))
        except KernlockError as err:
            _fail(str(err))
        except OSError as err:  # the local disk: a read-only project, a full cache...
            where = f" ({err.filename})" if err.filename else ""
            _fail(f"{err.strerror or err}{where}; check the folder's permissions and free space.")

    return wrapper


def _interrupted(code: int) -> None:
    """Stop now: running downloads are abandoned (their ``.incomplete`` files resume next time), and no worker
    thread is waited for."""
    click.secho(
        "interrupted: stopped before the end; nothing partial was made visible. Run the command again to resume.",
        fg="yellow",
        err=True,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fail(message: str) -> None:
    if click.get_current_context().find_root().params.get("verbose"):
        import traceback

        traceback.print_exc()
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_version, help="Show the version and exit."
)
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks with errors.")
def main(verbose: bool) -> None:
    """Lock Hugging Face Hub kernels to exact commits and build variants for every environment."""
    from kernlock import interrupt

    interrupt.install_handlers()


@main.command()
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@click.option("--trust", is_flag=True, help="Accept a publisher the Hub does not mark as trusted (recorded).")
@click.option("--no-sync", is_flag=True, help="Only record and lock; do not download.")
@project_option
@handle_errors
def add(specs: tuple[str, ...], trust: bool, no_sync: bool, project_dir: Path | None) -> None:
    """Add kernels (SPEC = org/name[@rev]) to pyproject.toml, re-lock and sync."""
    from kernlock import api

    try:
        result = api.add(project_dir, list(specs), trust=trust)
    except DuplicateSpecError as err:
        raise click.UsageError(str(err)) from err
    if result.created:
        click.echo(f"created {result.created} (no enclosing project was found)")
    for repo, rev in result.added.items():
        click.echo(f'added {repo} = "{rev}"')
    _print_lock(result.lock)
    if not no_sync:
        report = api.sync_after_add(result.lock.lock)
        if report is None:
            click.echo(
                "not synced: this machine is not one of the lock's environments "
                "(`kernlock sync --all-environments` fills a cache for all of them)"
            )
        else:
            _print_sync(report)


@main.command()
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@project_option
@handle_errors
def remove(names: tuple[str, ...], project_dir: Path | None) -> None:
    """Remove kernels from pyproject.toml and re-lock."""
    from kernlock import api

    result = api.remove(project_dir, list(names))
    click.echo(f"removed {', '.join(names)}")
    _print_lock(result)


@main.command()
@click.option("--upgrade", is_flag=True, help="Move every kernel to the newest commit of its revision.")
@click.option("--upgrade-kernel", "upgrade_kernels", multiple=True, metavar="NAME", help="Move one kernel.")
@click.option("--check", is_flag=True, help="Exit 1 without writing if kernels.lock is stale.")
@click.option("--dry-run", is_flag=True, help="Show what would change in kernels.lock without writing it.")
@project_option
@handle_errors
def lock(upgrade: bool, upgrade_kernels: tuple[str, ...], check: bool, dry_run: bool, project_dir: Path | None) -> None:
    """Resolve all requirements for all target environments into kernels.lock."""
    from kernlock import api
    from kernlock.project import Upgrade

    if check and (upgrade or upgrade_kernels or dry_run):
        raise click.UsageError("--check cannot be combined with --upgrade / --upgrade-kernel / --dry-run.")
    result = api.lock(
        project_dir, Upgrade(all=upgrade, kernels=frozenset(upgrade_kernels)), check=check, dry_run=dry_run
    )
    if check:
        click.echo("kernels.lock is up to date")
        return
    _print_lock(result, dry_run)


def _print_lock(result: api.LockResult, dry_run: bool = False) -> None:
    if not result.written:
        click.echo(f"kernels.lock is up to date ({len(result.lock.kernels)} entries)")
        return
    if result.previous is not None:
        from kernlock import changes

        diff = changes.diff(result.previous, result.lock)
        click.echo(f"{'would write' if dry_run else 'wrote'} kernels.lock ({result.reason})")
        for line in diff.render() or ["(no kernel changes: the file is rewritten in the current format)"]:
            click.echo(f"  {line}" if line.startswith(" ") else line)
        return
    click.echo(f"{'would write' if dry_run else 'wrote'} kernels.lock ({result.reason})")
    for kernel in result.lock.kernels:
        via = f" (dependency of {', '.join(kernel.required_by)})" if kernel.required_by else ""
        click.echo(f"  {kernel.repo} {kernel.requested} -> {kernel.commit[:12]}{via}")
        for env, variant in sorted((env, v.name) for v in kernel.variants for env in v.environments):
            click.echo(f"    {env} -> {variant}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@project_option
@handle_errors
def env(as_json: bool, project_dir: Path | None) -> None:
    """This machine's environment string and the variant each locked kernel would load here."""
    from kernlock import api

    report = api.env_report(project_dir)
    if as_json:
        import json

        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"environment: {report['environment']}")
    from kernlock.facts import as_toml

    click.echo(f"declare as: {as_toml(report['declared'])}")
    for name, version in report["versions"].items():
        click.echo(f"{name}: {version or 'not installed'}")
    if report.get("unsupported_loader"):
        click.secho(f"WARNING: {report['unsupported_loader']}", fg="yellow")
    gate = report.get("transformers_gate")
    if gate:
        click.secho(("ok: " if gate["ok"] else "WARNING: ") + gate["message"], fg=None if gate["ok"] else "yellow")
    loader = report["loader"]
    if loader["generation"] is None:
        click.echo("loader: kernels is not installed")
    elif loader["generation"] == "unknown":
        click.secho(
            f"loader: kernels {loader['kernels']} (unknown generation: lacks {', '.join(loader.get('missing', []))}); "
            "activation pins locked kernels through LOCAL_KERNELS only; upgrade kernlock: `pip install -U kernlock`",
            fg="yellow",
        )
    else:
        click.echo(f"loader: kernels {loader['kernels']} ({loader['generation']} generation)")
    if report["load_paths"]:
        click.echo("load paths:")
    for row in report["load_paths"]:
        label = "covered" if row["covered"] else "n/a" if row["how"].startswith("not supported") else "NOT covered"
        click.echo(f"  {label:<12}{row['path']}: {row['how']}")
    for line in report.get("facts_differ", []):
        click.secho(f"WARNING: {line} (declared facts of this environment in pyproject.toml)", fg="yellow")
    if report["kernels"]:
        click.echo("locked kernels, variant here:")
    for row in report["kernels"]:
        click.echo(f"  {row['repo']}: {row['variant'] or 'NOT LOCKED for this environment'}")
    if report.get("lock_error"):
        click.echo(f"  ({report['lock_error']})")


# -- sync / verify / show (issue #4) -----------------------------------------------------------------------


@main.command()
@click.option("--all-environments", is_flag=True, help="Every locked environment's variants (fill a shared cache).")
@click.option("--locked", is_flag=True, help="Fail (exit 1) if kernels.lock is stale instead of re-locking.")
@click.option("--frozen", is_flag=True, help="Use kernels.lock as it is, without checking it against pyproject.toml.")
@click.option("--offline", is_flag=True, help="Make no request: verify the cache, fail on anything missing or corrupt.")
@click.option(
    "--from",
    "from_bundle",
    metavar="FILE",
    callback=_file,
    help="Install from a bundle of this kernels.lock, no network.",
)
@project_option
@handle_errors
def sync(
    all_environments: bool,
    locked: bool,
    frozen: bool,
    offline: bool,
    from_bundle: Path | None,
    project_dir: Path | None,
) -> None:
    """Download and verify exactly the locked files this environment needs."""
    from kernlock import api

    if locked and frozen:
        raise click.UsageError("--locked and --frozen cannot be combined.")
    if from_bundle is not None:
        if locked or frozen or offline:
            raise click.UsageError("--from installs kernels.lock as it is: drop --locked, --frozen and --offline.")
        _print_sync(api.sync_from(project_dir, from_bundle, all_environments=all_environments))
        return
    report = api.sync(project_dir, all_environments=all_environments, locked=locked, frozen=frozen, offline=offline)
    _print_sync(report)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _print_sync(report: Any) -> None:
    """Print a kernlock.sync.SyncReport: what was downloaded or repaired, and a one-line summary."""
    if report.relocked:
        click.echo(f"re-locked kernels.lock first ({report.relocked})")
    for v in report.variants:
        if v.repaired:
            click.secho(
                f"  repaired {v.repo} {v.variant}: {', '.join(v.repaired)} did not match kernels.lock", fg="yellow"
            )
        if v.removed:
            click.secho(
                f"  removed from {v.repo} {v.variant}: {', '.join(v.removed)} (not in kernels.lock)", fg="yellow"
            )
        if v.downloaded:
            click.echo(f"  downloaded {v.repo} {v.variant} ({len(v.downloaded)} files, {_size(v.downloaded_bytes)})")
    fetched = sum(1 for v in report.variants if v.downloaded)
    present = len(report.variants) - fetched
    mode = "checked offline" if report.offline else f"{fetched} downloaded, {present} already verified"
    click.echo(
        f"synced {count(len(report.variants), 'variant')} of {count(len(report.kernels), 'kernel')} for "
        f"{', '.join(report.environments)} into {report.cache} ({mode})"
    )


@main.command()
@click.option("--all-environments", is_flag=True, help="Require the variants of every locked environment.")
@project_option
@handle_errors
def verify(all_environments: bool, project_dir: Path | None) -> None:
    """Re-hash the synced files against kernels.lock; exit 1 naming every file that does not match."""
    from kernlock import api

    result = api.verify(project_dir, all_environments=all_environments)
    if not result.ok:
        for problem in result.problems:
            click.secho(f"  {problem}", fg="red", err=True)
        kinds = {problem.kind.value for problem in result.problems}
        what = [
            text
            for kind, text in (
                ("not synced", "not synced"),
                ("missing", "missing"),
                ("mismatch", "changed"),
                ("unexpected", "not in kernels.lock"),
            )
            if kind in kinds
        ]
        click.secho(
            f"error: {count(len(result.problems), 'problem')} in {result.cache} ({', '.join(what)}); run "
            "`kernlock sync` to download, replace or remove what does not match kernels.lock.",
            fg="red",
            err=True,
        )
        sys.exit(1)
    click.echo(
        f"verified {count(len(result.checked), 'variant')}, {count(result.files, 'file')} in {result.cache}: "
        "all match kernels.lock"
    )


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@project_option
@handle_errors
def show(as_json: bool, project_dir: Path | None) -> None:
    """Table of locked kernels: requested, resolved ref, commit, variant for this environment, synced."""
    from kernlock import api

    result = api.show(project_dir)
    if result.stale:
        click.secho(f"warning: kernels.lock is stale: {result.stale}; run `kernlock lock`.", fg="yellow", err=True)
    rows = result.rows
    if as_json:
        import json

        click.echo(json.dumps(rows, indent=2))
        return
    header = ("kernel", "requested", "ref", "commit", "variant (this environment)", "synced")
    table = [header]
    for row in rows:
        synced = "-" if row["synced"] is None else "yes" if row["synced"] else "no"
        table.append(
            (
                row["repo"] + (f" (for {', '.join(row['required_by'])})" if row["required_by"] else ""),
                row["requested"],
                row["ref"],
                row["commit"][:12],
                row["variant"] or "-",
                synced,
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for line in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


# -- run (issue #5) --------------------------------------------------------------------------------------------


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--mode", type=click.Choice(["strict", "warn"]), help="Sets KERNLOCK_MODE for CMD (default: strict).")
@project_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD...")
@handle_errors
def run(mode: str | None, project_dir: Path | None, command: tuple[str, ...]) -> None:
    """Run CMD with activation in every Python process it starts (see docs/activation.md); exits with CMD's status."""
    from kernlock import runtime

    env = runtime.run_environment(project_dir / runtime.LOCK_NAME if project_dir is not None else None, mode)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "nt":  # no exec on Windows: wait and pass the exit status on
        import subprocess

        sys.exit(subprocess.call(list(command), env=env))
    try:
        os.execvpe(command[0], list(command), env)
    except OSError as err:
        raise KernlockError(f"cannot run {command[0]!r}: {err.strerror or err}; check the command and PATH.") from err


# -- import / export / outdated (issue #14) --------------------------------------------------------------------


@main.command("import")
@click.option("--trust", is_flag=True, help="Accept publishers the Hub does not mark as trusted (recorded).")
@project_option
@handle_errors
def import_(trust: bool, project_dir: Path | None) -> None:
    """Migrate the kernels library's [tool.kernels.dependencies] and JSON kernels.lock, keeping its commits."""
    from kernlock import api

    result = api.import_kernels(project_dir, trust=trust)
    for repo, rev in result.requirements.items():
        click.echo(f'[tool.kernlock.kernels] "{repo}" = "{rev}"')
    for outcome in result.outcomes:
        pin = outcome.pin
        if outcome.kept:
            click.echo(f"  kept {pin.repo} {pin.rev} {pin.commit[:12]}")
        else:
            now = f" -> {outcome.commit[:12]}" if outcome.commit else ""
            click.secho(f"  not kept {pin.repo} {pin.rev} {pin.commit[:12]}{now}: {outcome.why}", fg="yellow")
    if result.moved_to is not None:
        click.echo(
            f"moved the kernels library's JSON lock to {result.moved_to.name} (refresh it with "
            f"`kernlock export --format kernels -o {result.moved_to.name}`)"
        )
    click.echo(f"wrote kernels.lock ({count(len(result.lock.kernels), 'entry', 'entries')})")


@main.command()
@click.option(
    "--format", "fmt", type=click.Choice(["kernels"]), required=True, help="kernels: the kernels library's JSON lock."
)
@click.option("-o", "--output", metavar="FILE", callback=_file, required=True, help="File to write.")
@click.option("--environment", metavar="ENV", help="Only the entries of this locked environment.")
@project_option
@handle_errors
def export(fmt: str, output: Path, environment: str | None, project_dir: Path | None) -> None:
    """Write the locked commits in another tool's lock format (kernels: for load_kernel / get_locked_kernel)."""
    from kernlock import api

    pins = api.export(project_dir, fmt, output, environment)
    click.echo(f"wrote {output} ({count(len(pins), 'kernel')}, {fmt} format)")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@project_option
@handle_errors
def outdated(as_json: bool, project_dir: Path | None) -> None:
    """Per locked kernel: did its branch or tag move, is there a newer version, what would `lock --upgrade` do."""
    from kernlock import api

    report = api.outdated(project_dir)
    if as_json:
        import json

        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    for row in report.rows:
        e = row.entry
        via = f" (dependency of {', '.join(e.required_by)})" if e.required_by else ""
        if row.pinned:
            state = "pinned by commit"
        elif row.gone:
            state = f"{e.ref} no longer exists on the Hub"
        elif row.moved is None:
            state = f"{e.ref} has not moved"
        elif row.moved.commits is None:
            state = f"{e.ref} was rewritten: now {row.moved.head[:12]} ({row.moved.date or 'date unknown'})"
        else:
            state = (
                f"{e.ref} moved {count(row.moved.commits, 'commit')} to {row.moved.head[:12]} "
                f"({row.moved.date or 'date unknown'})"
            )
        click.echo(f"{e.repo} {e.requested} {e.commit[:12]}{via}: {state}")
        if row.newer_version:
            click.echo(f"  newer version with builds for every environment: {row.newest}")
    if report.upgrade_error:
        click.secho(f"`kernlock lock --upgrade` would fail: {report.upgrade_error}", fg="yellow")
    elif report.upgrade:
        click.echo("`kernlock lock --upgrade` would change:")
        for line in report.upgrade.render():
            click.echo(f"  {line}")
    else:
        click.echo("`kernlock lock --upgrade` would change nothing")


# -- air-gapped sites: bundle / serve (issue #15) ----------------------------------------------------------


@main.command()
@click.option("-o", "--output", "out", required=True, metavar="FILE", callback=_file, help="The bundle to write.")
@click.option(
    "--environment",
    "environments",
    multiple=True,
    help="Bundle the variants this environment loads (repeatable); default: every environment of the lock.",
)
@project_option
@handle_errors
def bundle(out: Path, environments: tuple[str, ...], project_dir: Path | None) -> None:
    """Write one archive (tar) with kernels.lock, a manifest and every locked file, for an air-gapped site."""
    from kernlock import api

    result = api.bundle(project_dir, out, list(environments) or None)
    click.echo(
        f"bundled {count(result.variants, 'variant')}, {count(result.files, 'file')} ({_size(result.size)}) for "
        f"{', '.join(result.environments)} into {result.path}"
    )


@main.command()
@click.option(
    "--from", "from_bundle", metavar="FILE", callback=_file, help="Serve a bundle (with its own kernels.lock)."
)
@click.option(
    "--cache",
    metavar="DIRECTORY",
    callback=_folder,
    default=None,
    help="Serve the project's kernels.lock from this kernel cache (default: KERNELS_CACHE / HF_HUB_CACHE).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every one).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64), help="Server processes.")
@click.option("--threads", default=8, show_default=True, type=click.IntRange(1, 256), help="Threads per process.")
@click.option("--access-log", default="-", show_default=True, help="Access log file (-: standard output).")
@project_option
@handle_errors
def serve(
    from_bundle: Path | None,
    cache: Path | None,
    host: str,
    port: int,
    workers: int,
    threads: int,
    access_log: str,
    project_dir: Path | None,
) -> None:
    """Serve exactly the locked commits as a read-only Hub mirror (point HF_ENDPOINT at it)."""
    from kernlock import api

    if from_bundle is not None and cache is not None:
        raise click.UsageError("--from and --cache cannot be combined.")
    app = api.mirror_app(project_dir, from_bundle, cache)
    for line in app.catalog.skipped:
        click.secho(f"  not served: {line}", fg="yellow", err=True)
    click.echo(
        f"serving {count(len(app.catalog.repos), 'kernel')}, {count(app.catalog.file_count, 'file')} of "
        f"kernels.lock at http://{host}:{port} (set HF_ENDPOINT there; GET /health)",
    )
    sys.stdout.flush()
    api.serve(app, host, port, workers, threads, access_log)
