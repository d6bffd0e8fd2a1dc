"""`kernlock bundle` and `kernlock serve`: parse arguments, call the library, print."""

from __future__ import annotations

from pathlib import Path

import click

from kernlock.cli.common import Command, examples, handle_errors, project_option, verbose_option
from kernlock.cli.common import file_option_value as _file
from kernlock.cli.common import folder_option_value as _folder

__all__ = ["bundle", "serve"]


@click.command(
    cls=Command,
    epilog=examples(
        ("kernlock bundle -o kernels.tar", "every environment of the lock"),
        ("kernlock bundle -o cuda.tar --environment torch211-cxx11-cu128-x86_64-linux", ""),
        page="airgap.md",
    ),
)
@click.option("-o", "--output", "out", required=True, metavar="FILE", callback=_file, help="The bundle to write.")
@click.option(
    "--environment",
    "environments",
    multiple=True,
    metavar="ENV",
    help="Bundle the variants this environment loads (repeatable); default: every environment of the lock.",
)
@project_option
@verbose_option()
@handle_errors
def bundle(out: Path, environments: tuple[str, ...], project_dir: Path | None) -> None:
    """Archive the lock and its files, for air-gapped sites.

    A deterministic tar: kernels.lock, a manifest and the files; `kernlock sync --from FILE` installs it.
    """
    from kernlock import api
    from kernlock.cli import output_airgap as cli_output

    cli_output.print_bundle(api.bundle(project_dir, out, list(environments) or None))


@click.command(
    cls=Command,
    epilog=examples(
        ("kernlock serve --from kernels.tar --host 0.0.0.0 --port 8080", "HF_ENDPOINT=http://HOST:8080"),
        ("kernlock serve --cache /shared/hf-cache", "from a synced cache"),
        page="airgap.md#3b-or-one-mirror-for-the-fleet",
    ),
)
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
@verbose_option()
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
    """Serve the locked commits as a read-only Hub mirror.

    Point HF_ENDPOINT at it: a fleet's machines sync from it as from the Hub.
    """
    from kernlock import api
    from kernlock.cli import output_airgap as cli_output

    if from_bundle is not None and cache is not None:
        raise click.UsageError("--from and --cache cannot be combined.")
    app = api.mirror_app(project_dir, from_bundle, cache)
    api.serve(app, host, port, workers, threads, access_log, lambda: cli_output.print_serving(app, host, port))
