"""The kernlock command line: parse arguments, call kernlock.api, print. No logic of its own."""

from __future__ import annotations

import sys

import click

from kernlock._version import __version__
from kernlock.cli.check import check
from kernlock.cli.common import Group, examples, handle_errors, mark_verbose, project_option, verbose_option
from kernlock.cli.common import file_option_value as _file
from kernlock.cli.run import run
from kernlock.errors import DuplicateSpecError

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


@click.group(
    cls=Group,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=examples(
        ("kernlock add kernels-community/flash-attn2", "lock it everywhere, download it here"),
        ("kernlock run -- python train.py", "its kernel loads come from kernels.lock"),
        ("kernlock sync -h", "the help of a command, with examples"),
        page="cli.md",
    ),
)
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_version, help="Show the version and exit."
)
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks with errors (here and in what `run` starts).")
def main(verbose: bool) -> None:
    """Lock Hugging Face Hub kernels to exact commits and build variants for every environment."""
    from kernlock.util import interrupt

    if verbose:
        mark_verbose(click.get_current_context())
    interrupt.install_handlers()


main.add_command(run)
main.add_command(check)


@main.command(
    epilog=examples(
        ("kernlock add kernels-community/activation@v1", "a branch; also a tag or a commit; none: the newest"),
        ("kernlock add --from ./checkpoint-500", "the builds a model folder (or Hub model repo) was trained with"),
        ("kernlock add --implicit", "the kernels transformers loads by itself, where it loads them"),
        page="locking.md",
    )
)
@click.argument("specs", nargs=-1, metavar="SPEC...")
@click.option("--trust", is_flag=True, help="Accept a publisher the Hub does not mark as trusted (recorded).")
@click.option("--no-sync", is_flag=True, help="Only record and lock; do not download.")
@click.option(
    "--from",
    "from_model",
    metavar="PATH_OR_REPO",
    help="Pin the kernel builds a model was computed with: the kernels.lock of a model folder or Hub model repo.",
)
@click.option(
    "--implicit",
    is_flag=True,
    help="Lock the Hub kernels the installed transformers loads by itself (every one, or those SPEC names).",
)
@project_option
@verbose_option()
@handle_errors
def add(
    specs: tuple[str, ...], trust: bool, no_sync: bool, from_model: str | None, implicit: bool, project_dir: Path | None
) -> None:
    """Add kernels to pyproject.toml, lock them and download them.

    SPEC is org/name[@rev]. Without a revision, the newest version branch with a build for every environment of
    the project is recorded. Nothing is written unless every kernel resolves. With --from, the builds a model
    folder or Hub model repo was computed with (its kernels.lock) are pinned instead. With --implicit, the kernels
    transformers' default kernel mapping loads, each for the environments whose device it maps.
    """
    from kernlock import api
    from kernlock.cli import output as cli_output

    if (implicit and from_model) or (not implicit and bool(specs) == bool(from_model)):
        raise click.UsageError("give kernels (SPEC...), --from PATH_OR_REPO or --implicit [SPEC...], one of them.")
    cli_output.warn_gate()
    if implicit:
        from kernlock.cli.output_implicit import print_implicit

        done = api.add_implicit(project_dir, list(specs), trust=trust)
        print_implicit(done)
        if done.added is None:
            return
        result = done.added
    elif from_model:
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


@main.command(
    epilog=examples(
        ("kernlock remove kernels-community/rotary", ""),
        ("kernlock remove kernels-community/rotary kernels-community/activation", ""),
        page="locking.md",
    )
)
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@project_option
@verbose_option()
@handle_errors
def remove(names: tuple[str, ...], project_dir: Path | None) -> None:
    """Remove kernels from pyproject.toml and re-lock."""
    from kernlock import api
    from kernlock.cli import output as cli_output

    result = api.remove(project_dir, list(names))
    click.echo(f"removed {', '.join(names)}")
    cli_output.print_lock(result)


@main.command(
    epilog=examples(
        ("kernlock lock", "lock what changed in pyproject.toml"),
        ("kernlock lock --upgrade-kernel kernels-community/flash-attn2 --sync", ""),
        ("kernlock lock --check", "CI: exit 1 if kernels.lock is stale"),
        page="locking.md",
    )
)
@click.option("--upgrade", is_flag=True, help="Move every kernel to the newest commit of its revision.")
@click.option("--upgrade-kernel", "upgrade_kernels", multiple=True, metavar="NAME", help="Move one kernel.")
@click.option("--check", is_flag=True, help="Exit 1 without writing if kernels.lock is stale.")
@click.option("--dry-run", is_flag=True, help="Show what would change in kernels.lock without writing it.")
@click.option("--sync", "then_sync", is_flag=True, help="Then download what changed for this environment (as add).")
@project_option
@verbose_option()
@handle_errors
def lock(
    upgrade: bool,
    upgrade_kernels: tuple[str, ...],
    check: bool,
    dry_run: bool,
    then_sync: bool,
    project_dir: Path | None,
) -> None:
    """Resolve every kernel for every environment into kernels.lock.

    Existing pins are kept unless their requirement changed (--upgrade moves them). lock downloads nothing:
    `kernlock sync`, or --sync, fetches what changed.
    """
    from kernlock import api
    from kernlock.cli import output as cli_output

    if check and (upgrade or upgrade_kernels or dry_run or then_sync):
        raise click.UsageError("--check cannot be combined with --upgrade / --upgrade-kernel / --dry-run / --sync.")
    if dry_run and then_sync:
        raise click.UsageError("--dry-run writes nothing to sync: drop --sync.")
    cli_output.warn_gate()
    if check:
        if not api.lock_is_current(project_dir):  # else an identical check passed and nothing it read changed
            api.lock(project_dir, check=True)
        click.echo("kernels.lock is up to date")
        return
    result = api.lock(project_dir, api.Upgrade(all=upgrade, kernels=frozenset(upgrade_kernels)), dry_run=dry_run)
    cli_output.print_lock(result, dry_run)
    if then_sync:
        cli_output.print_sync_after_add(api.sync_after_add(result.lock, root=project_dir))
    elif not dry_run:
        cli_output.print_not_synced(result)


@main.command(
    epilog=examples(
        ("kernlock env", "this machine, and what it would load"),
        ("kernlock env -v", "also each load path kernlock pins"),
        ("kernlock env --json", ""),
        page="activation.md#load-paths-covered-per-loader-generation",
    )
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (everything -v shows too).")
@project_option
@click.option("-v", "--verbose", is_flag=True, help="Also the loader, its load paths, and tracebacks with errors.")
@handle_errors
def env(as_json: bool, project_dir: Path | None, verbose: bool) -> None:
    """This machine's environment, and what it loads of the lock.

    Also warns when the installed transformers/kernels pair turns transformers' Hub kernel paths off, and lists
    the Hub kernels transformers loads by itself here (its default kernel mapping), each locked or not.
    """
    from kernlock import api
    from kernlock.cli import output as cli_output

    ctx = click.get_current_context()
    verbose = verbose or bool(ctx.find_root().params["verbose"])
    if verbose:
        mark_verbose(ctx)
    report = api.env_report(project_dir)
    if as_json:
        import json

        click.echo(json.dumps(report, indent=2))
        return
    cli_output.print_env(report, verbose=verbose)
    from kernlock.cli.output_implicit import print_implicit_env

    print_implicit_env(report.get("implicit"))


@main.command(
    epilog=examples(
        ("kernlock sync", "download and verify this environment's files"),
        ("kernlock sync --locked", "CI: fail if kernels.lock is stale"),
        ("kernlock sync --from kernels.tar", "air-gapped: install a bundle"),
        page="sync.md",
    )
)
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
@verbose_option()
@handle_errors
def sync(
    all_environments: bool,
    locked: bool,
    frozen: bool,
    offline: bool,
    from_bundle: Path | None,
    project_dir: Path | None,
) -> None:
    """Download and verify the locked files this environment needs.

    A stale kernels.lock is re-locked first (--locked fails instead, --frozen uses it as it is).
    """
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
    found = api.synced(project_dir, frozen=frozen, all_environments=all_environments, offline=offline)
    if found is not None:  # an identical sync found everything in place and nothing changed since
        cli_output.print_synced(found)
        return
    report = api.sync(project_dir, all_environments=all_environments, locked=locked, frozen=frozen, offline=offline)
    cli_output.print_sync(report)


@main.command(
    epilog=examples(
        ("kernlock verify", ""),
        ("kernlock verify --all-environments", "a shared cache"),
        page="sync.md#tampering",
    )
)
@click.option("--all-environments", is_flag=True, help="Require the variants of every locked environment.")
@click.option(
    "--full",
    is_flag=True,
    help="Verify every signature with sigstore again (by default one verified before, for the same bundle and "
    "trusted root, is not).",
)
@project_option
@verbose_option()
@handle_errors
def verify(all_environments: bool, full: bool, project_dir: Path | None) -> None:
    """Re-hash the synced files against kernels.lock, offline.

    Exit 1 naming every file that does not match, or when nothing here could be checked; recorded signatures are
    verified again too.
    """
    from kernlock import api
    from kernlock.cli import output as cli_output

    result = api.verify(project_dir, all_environments=all_environments, full=full)
    if not cli_output.print_verify(result):
        sys.exit(1)


@main.command(epilog=examples(("kernlock show", ""), ("kernlock show --json", ""), page="lockfile.md"))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@project_option
@verbose_option()
@handle_errors
def show(as_json: bool, project_dir: Path | None) -> None:
    """Table of the locked kernels and whether each is synced here.

    Columns: kernel, requested, resolved ref, commit, variant for this environment, synced, signer.
    """
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


@main.command(epilog=examples(("kernlock outdated", ""), ("kernlock outdated --json", ""), page="locking.md"))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@project_option
@verbose_option()
@handle_errors
def outdated(as_json: bool, project_dir: Path | None) -> None:
    """What moved on the Hub since locking; what an upgrade changes.

    Per locked kernel: did its branch or tag move, is there a newer version with builds for every environment, and
    what `kernlock lock --upgrade` would change.
    """
    from kernlock import api
    from kernlock.cli import output as cli_output

    report = api.outdated(project_dir)
    if as_json:
        import json

        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    cli_output.print_outdated(report)


from kernlock.cli.airgap import bundle, serve  # noqa: E402  (their own module: this one stays short)
from kernlock.cli.environments import environments  # noqa: E402
from kernlock.cli.interop import export, import_  # noqa: E402
from kernlock.cli.ray_env import ray_env  # noqa: E402

for _own in (import_, export, bundle, serve, environments, ray_env):
    main.add_command(_own)

from kernlock.cli.hook import hook  # noqa: E402  (a group of its own module; cli.py is the one that imports it)

for _command in hook.commands.values():  # its commands get the error handling here: no import cycle
    _command.callback = handle_errors(_command.callback)  # type: ignore[arg-type]
main.add_command(hook)
