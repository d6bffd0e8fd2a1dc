"""The kernlock command line: parse arguments, call kernlock.api, print. No logic of its own."""

from __future__ import annotations

import sys

import click

from kernlock._version import __version__
from kernlock.cli.common import file_option_value as _file
from kernlock.cli.common import folder_option_value as _folder
from kernlock.cli.common import handle_errors, project_option
from kernlock.cli.run import check, run
from kernlock.errors import DuplicateSpecError
from kernlock.util.wording import count

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path


__all__ = [
    "add",
    "bundle",
    "check",
    "env",
    "export",
    "handle_errors",
    "import_",
    "lock",
    "main",
    "outdated",
    "remove",
    "run",
    "serve",
    "show",
    "sync",
    "verify",
]


# Each command imports kernlock.api (and with it the lock model) when it runs: `--help` and `--version` cost
# what click costs. The network stack (huggingface_hub, httpx) is imported only when a request is made.


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: what click's version_option prints, without the locale lookup it imports."""
    if value and not ctx.resilient_parsing:
        click.echo(f"kernlock, version {__version__}")
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_version, help="Show the version and exit."
)
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks with errors.")
def main(verbose: bool) -> None:
    """Lock Hugging Face Hub kernels to exact commits and build variants for every environment."""
    from kernlock.util import interrupt

    interrupt.install_handlers()


main.add_command(run)
main.add_command(check)


@main.command()
@click.argument("specs", nargs=-1, metavar="SPEC...")
@click.option("--trust", is_flag=True, help="Accept a publisher the Hub does not mark as trusted (recorded).")
@click.option("--no-sync", is_flag=True, help="Only record and lock; do not download.")
@click.option(
    "--from",
    "from_model",
    metavar="PATH_OR_REPO",
    help="Pin the kernel builds a model was computed with: the kernels.lock of a model folder or Hub model repo.",
)
@project_option
@handle_errors
def add(specs: tuple[str, ...], trust: bool, no_sync: bool, from_model: str | None, project_dir: Path | None) -> None:
    """Add kernels (SPEC = org/name[@rev]) to pyproject.toml, re-lock and sync."""
    from kernlock import api
    from kernlock.cli import output as cli_output

    if bool(specs) == bool(from_model):
        raise click.UsageError("give kernels (SPEC...) or --from PATH_OR_REPO, one of the two.")
    cli_output.warn_gate()
    if from_model:
        from kernlock.cli.output_adopt import print_adopted

        adopted = api.add_from(project_dir, from_model, trust=trust)
        print_adopted(adopted)
        result = adopted.added
    else:
        try:
            result = api.add(project_dir, list(specs), trust=trust)
        except DuplicateSpecError as err:
            raise click.UsageError(str(err)) from err
        cli_output.print_added(result)
    if not no_sync:
        cli_output.print_sync_after_add(api.sync_after_add(result.lock.lock, root=project_dir))


@main.command()
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@project_option
@handle_errors
def remove(names: tuple[str, ...], project_dir: Path | None) -> None:
    """Remove kernels from pyproject.toml and re-lock."""
    from kernlock import api
    from kernlock.cli import output as cli_output

    result = api.remove(project_dir, list(names))
    click.echo(f"removed {', '.join(names)}")
    cli_output.print_lock(result)


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
    from kernlock.cli import output as cli_output
    from kernlock.project.inputs import Upgrade

    if check and (upgrade or upgrade_kernels or dry_run):
        raise click.UsageError("--check cannot be combined with --upgrade / --upgrade-kernel / --dry-run.")
    cli_output.warn_gate()
    result = api.lock(
        project_dir, Upgrade(all=upgrade, kernels=frozenset(upgrade_kernels)), check=check, dry_run=dry_run
    )
    if check:
        click.echo("kernels.lock is up to date")
        return
    cli_output.print_lock(result, dry_run)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@project_option
@handle_errors
def env(as_json: bool, project_dir: Path | None) -> None:
    """This machine's environment string and the variant each locked kernel would load here."""
    from kernlock import api
    from kernlock.cli import output as cli_output

    report = api.env_report(project_dir)
    if as_json:
        import json

        click.echo(json.dumps(report, indent=2))
        return
    cli_output.print_env(report)


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
    from kernlock.cli import output as cli_output

    if locked and frozen:
        raise click.UsageError("--locked and --frozen cannot be combined.")
    cli_output.warn_gate()
    if from_bundle is not None:
        if locked or frozen or offline:
            raise click.UsageError("--from installs kernels.lock as it is: drop --locked, --frozen and --offline.")
        cli_output.print_sync(api.sync_from(project_dir, from_bundle, all_environments=all_environments))
        return
    report = api.sync(project_dir, all_environments=all_environments, locked=locked, frozen=frozen, offline=offline)
    cli_output.print_sync(report)


@main.command()
@click.option("--all-environments", is_flag=True, help="Require the variants of every locked environment.")
@click.option(
    "--full",
    is_flag=True,
    help="Verify every signature with sigstore again (by default one verified before, for the same bundle and "
    "trusted root, is not).",
)
@project_option
@handle_errors
def verify(all_environments: bool, full: bool, project_dir: Path | None) -> None:
    """Re-hash the synced files against kernels.lock; exit 1 naming every file that does not match."""
    from kernlock import api
    from kernlock.cli import output as cli_output

    result = api.verify(project_dir, all_environments=all_environments, full=full)
    if not cli_output.print_verify(result):
        sys.exit(1)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@project_option
@handle_errors
def show(as_json: bool, project_dir: Path | None) -> None:
    """Table of locked kernels: requested, resolved ref, commit, variant for this environment, synced."""
    from kernlock import api
    from kernlock.cli import output as cli_output

    cli_output.warn_gate()
    result = api.show(project_dir)
    if result.stale:
        click.secho(f"warning: kernels.lock is stale: {result.stale}; run `kernlock lock`.", fg="yellow", err=True)
    rows = result.rows
    if as_json:
        import json

        click.echo(json.dumps(rows, indent=2))
        return
    cli_output.print_show(rows, result.no_variant)


@main.command("import")
@click.option("--trust", is_flag=True, help="Accept publishers the Hub does not mark as trusted (recorded).")
@project_option
@handle_errors
def import_(trust: bool, project_dir: Path | None) -> None:
    """Migrate the kernels library's [tool.kernels.dependencies] and JSON kernels.lock, keeping its commits."""
    from kernlock import api
    from kernlock.cli import output as cli_output

    cli_output.print_import(api.import_kernels(project_dir, trust=trust))


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
    from kernlock.cli import output as cli_output

    report = api.outdated(project_dir)
    if as_json:
        import json

        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    cli_output.print_outdated(report)


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
    from kernlock.cli import output as cli_output

    cli_output.print_bundle(api.bundle(project_dir, out, list(environments) or None))


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
    from kernlock.cli import output as cli_output

    if from_bundle is not None and cache is not None:
        raise click.UsageError("--from and --cache cannot be combined.")
    app = api.mirror_app(project_dir, from_bundle, cache)
    api.serve(app, host, port, workers, threads, access_log, lambda: cli_output.print_serving(app, host, port))


from kernlock.cli.hook import hook  # noqa: E402  (a group of its own module; cli.py is the one that imports it)

for _command in hook.commands.values():  # its commands get the error handling here: no import cycle
    _command.callback = handle_errors(_command.callback)  # type: ignore[arg-type]
main.add_command(hook)
